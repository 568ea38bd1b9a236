// The backward pass of LeNet-5's c2 direct 5x5 convolution (conv5x5_to16.cpp is the forward),
// compiled once per SIMD target (Google Highway) on dout stored channels-last as the forward pass
// leaves it: the bias and weight gradients from register blocks of taps x output channel vectors
// accumulated over each sample's pixels, and the input gradient either by tap planes
// (conv5x5_to16_planes-inl.h) where the image is small enough or per input pixel.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "layers/conv5x5_to16_backward.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "layers/conv5x5-inl.h"
#include "layers/conv5x5_to16-inl.h"
#include "layers/conv5x5_to16_planes-inl.h"
#include "layers/simd-inl.h"

#ifndef CNNBENCH_LAYERS_CONV5X5_TO16_BACKWARD_ONCE
#define CNNBENCH_LAYERS_CONV5X5_TO16_BACKWARD_ONCE
#include <algorithm>
#include <cstddef>

#include "cnnbench/core.hpp"
#include "cnnbench/layers.hpp"

namespace cnnbench::conv5x5 {

// dweight (16,C,5,5) += packed (C,5,5,16).
inline void add_unpacked(float* dweight, const float* packed, int C) {
  for (int k = 0; k < channels; ++k) {
    for (int c = 0; c < C; ++c) {
      for (int t = 0; t < taps; ++t) {
        dweight[(k * C + c) * taps + t] += packed[(c * taps + t) * channels + k];
      }
    }
  }
}

}  // namespace cnnbench::conv5x5
#endif  // CNNBENCH_LAYERS_CONV5X5_TO16_BACKWARD_ONCE

HWY_BEFORE_NAMESPACE();
namespace cnnbench::HWY_NAMESPACE {
namespace {

using conv5x5::channels;
using conv5x5::taps;

// Weight gradient of one input channel: KY kernel rows x 5 taps x MB channel vectors of
// accumulators, MB dout vectors and a broadcast pixel beside them. AVX-512 5 x 5 x 1 (the whole
// kernel), AVX2 1 x 5 x 2, SSE4 1 x 5 x 2 (of 4), NEON 1 x 5 x 4.
constexpr int c2_gradient_vectors() {
  for (int mb = channel_vectors; mb > 1; mb /= 2) {
    if (fits(5 * mb, mb + 1)) return mb;
  }
  return 1;
}
constexpr int c2_gradient_rows =
    channel_vectors == 1 && 25 + 2 + product_registers <= vector_registers ? 5 : 1;
// Two output pixels at a time, where the block is the whole kernel (AVX-512) and the second
// pixel's dout vector fits beside it: pixel x + 1 + kx is tap kx + 1 of x and tap kx of x + 1, so
// each broadcast serves both (6 per kernel row instead of 10). One at a time, the broadcasts were
// as many loads as there were multiply-adds; the weight gradient went from 145 to 119 us at batch
// 64 on avx3. On the 16-register targets, whose blocks are one kernel row, pairs were no faster
// (avx2, sse4) or 2% slower (scalar, serial LeNet-5).
constexpr bool c2_gradient_pairs =
    c2_gradient_rows == 5 && 25 + 3 + product_registers <= vector_registers;

// acc += the products of P neighbouring output pixels with their input patches: pixels is the
// first pixel's top-left input pixel, dout_pixels the first pixel's dout from lane block m0 on
// (channels-last). Input pixel at of a kernel row is tap at - i of pixel i, so one broadcast
// serves every pixel it is a tap of: 4 + P broadcasts per kernel row instead of 5 P.
template <int P, int KY, int MB>
HWY_INLINE void c2_gradient_pixels(FloatVec (&acc)[KY][5][MB], const float* pixels,
                                   const float* dout_pixels, int W) {
  const FloatTag d;
  FloatVec dv[P][MB];
#pragma GCC unroll 2
  for (int i = 0; i < P; ++i) {
#pragma GCC unroll 4
    for (int mb = 0; mb < MB; ++mb) {
      dv[i][mb] = hn::LoadU(d, dout_pixels + i * channels + mb * lanes);
    }
  }
#pragma GCC unroll 5
  for (int ky = 0; ky < KY; ++ky) {
#pragma GCC unroll 6
    for (int at = 0; at < 5 + P - 1; ++at) {
      const FloatVec pixel = hn::Set(d, pixels[ky * W + at]);
#pragma GCC unroll 4
      for (int mb = 0; mb < MB; ++mb) {
#pragma GCC unroll 2
        for (int i = 0; i < P; ++i) {
          const int kx = at - i;
          if (kx >= 0 && kx < 5) acc[ky][kx][mb] = hn::MulAdd(dv[i][mb], pixel, acc[ky][kx][mb]);
        }
      }
    }
  }
}

// packed_dweight (C,5,5,16) += this sample's products for channel c, kernel rows [ky0, ky0+KY),
// output channels [m0 lanes, (m0 + MB) lanes).
template <int KY, int MB>
HWY_NOINLINE void c2_gradient_block(float* packed_dweight, const float* dout_b, const float* inp_b,
                                    int c, int ky0, int m0, int H, int W) {
  const FloatTag d;
  const int Ho = H - 4, Wo = W - 4;
  FloatVec acc[KY][5][MB];
#pragma GCC unroll 5
  for (int ky = 0; ky < KY; ++ky) {
#pragma GCC unroll 5
    for (int kx = 0; kx < 5; ++kx) {
#pragma GCC unroll 4
      for (int mb = 0; mb < MB; ++mb) acc[ky][kx][mb] = hn::Zero(d);
    }
  }
  for (int y = 0; y < Ho; ++y) {
    const float* rows = inp_b + (std::size_t(c) * H + y + ky0) * W;
    const float* dout_row = dout_b + std::size_t(y) * Wo * channels + m0 * lanes;
    int x = 0;
    for (; c2_gradient_pairs && x + 2 <= Wo; x += 2) {
      c2_gradient_pixels<2>(acc, opaque(rows + x), dout_row + x * channels, W);
    }
    for (; x < Wo; ++x) c2_gradient_pixels<1>(acc, opaque(rows + x), dout_row + x * channels, W);
  }
  for (int ky = 0; ky < KY; ++ky) {
    for (int kx = 0; kx < 5; ++kx) {
      for (int mb = 0; mb < MB; ++mb) {
        float* total = packed_dweight + (c * taps + (ky0 + ky) * 5 + kx) * channels +
                       (m0 + mb) * lanes;
        hn::StoreU(hn::Add(hn::LoadU(d, total), acc[ky][kx][mb]), d, total);
      }
    }
  }
}

void c2_weight_gradient(float* packed_dweight, const float* dout_b, const float* inp_b, int C,
                        int H, int W) {
  constexpr int KY = c2_gradient_rows, MB = c2_gradient_vectors();
  for (int c = 0; c < C; ++c) {
    for (int ky0 = 0; ky0 < 5; ky0 += KY) {
      for (int m0 = 0; m0 < channel_vectors; m0 += MB) {
        c2_gradient_block<KY, MB>(packed_dweight, dout_b, inp_b, c, ky0, m0, H, W);
      }
    }
  }
}

// Input gradient, general shapes: per input pixel, the 16-channel products of every tap that
// reaches it, summed across lanes at the end.
void c2_input_gradient_any_shape(float* dinp_b, const float* dout_b, const float* packed, int C,
                                 int H, int W) {
  const FloatTag d;
  const int Ho = H - 4, Wo = W - 4;
  for (int c = 0; c < C; ++c) {
    for (int iy = 0; iy < H; ++iy) {
      const int ky_first = std::max(0, iy - Ho + 1), ky_last = std::min(4, iy);
      for (int ix = 0; ix < W; ++ix) {
        const int kx_first = std::max(0, ix - Wo + 1), kx_last = std::min(4, ix);
        FloatVec acc = hn::Zero(d);
        for (int ky = ky_first; ky <= ky_last; ++ky) {
          for (int kx = kx_first; kx <= kx_last; ++kx) {
            const float* dv = dout_b + (std::size_t(iy - ky) * Wo + ix - kx) * channels;
            const float* wv = packed + (c * taps + ky * 5 + kx) * channels;
            for (int m = 0; m < channel_vectors; ++m) {
              acc = hn::MulAdd(hn::LoadU(d, dv + m * lanes), hn::LoadU(d, wv + m * lanes), acc);
            }
          }
        }
        dinp_b[(std::size_t(c) * H + iy) * W + ix] = sum_of_lanes(acc);
      }
    }
  }
}

void c2_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                 const float* weight, int B, int C, int H, int W, float* scratch) {
  constexpr int M = channel_vectors;
  const FloatTag d;
  float* packed = scratch;
  float* packed_dweight = scratch + std::size_t(C) * taps * channels;
  conv5x5::pack_channels_last(packed, weight, C);
  std::fill_n(packed_dweight, std::size_t(C) * taps * channels, 0.0f);
  const int Ho = H - 4, Wo = W - 4;
  FloatVec bias_total[M];
  for (int m = 0; m < M; ++m) bias_total[m] = hn::Zero(d);
  const bool by_planes =
      dinp && W <= conv5x5::max_width_by_planes && H <= conv5x5::max_rows_by_planes;
  // 42 KB on the stack: no allocation in the training loop
  conv5x5::DoutPlanes dout_planes;
  conv5x5::TapPlanes tap_planes_c;
  TapMasks in_row;
  if (by_planes) make_tap_masks(in_row, W);
  // As many samples at a time as the planes hold where a sample's pixels end inside a vector
  // (which then needs no padding); one at a time where they fill whole vectors, on which two at a
  // time were 1-3% slower (SSE4).
  const bool padded = Ho * Wo % lanes != 0;
  const int group = by_planes && padded ? conv5x5::max_plane_floats / (Ho * Wo) : 1;
  for (int b0 = 0; b0 < B; b0 += group) {
    const int samples = std::min(group, B - b0);
    for (int b = b0; b < b0 + samples; ++b) {
      const float* dout_b = dout + std::size_t(b) * Ho * Wo * channels;
      const float* inp_b = inp + std::size_t(b) * C * H * W;
      if (dweight) {
        for (int p = 0; p < Ho * Wo; ++p) {
          for (int m = 0; m < M; ++m) {
            bias_total[m] =
                hn::Add(bias_total[m], hn::LoadU(d, dout_b + p * channels + m * lanes));
          }
        }
        c2_weight_gradient(packed_dweight, dout_b, inp_b, C, H, W);
      }
      if (dinp && !by_planes) {
        c2_input_gradient_any_shape(dinp + std::size_t(b) * C * H * W, dout_b, packed, C, H, W);
      }
    }
    if (by_planes) {
      c2_input_gradient_by_planes(dinp + std::size_t(b0) * C * H * W,
                                  dout + std::size_t(b0) * Ho * Wo * channels, packed, samples, C,
                                  H, W, in_row, dout_planes, tap_planes_c);
    }
  }
  if (!dweight) return;
  for (int m = 0; m < M; ++m) {
    alignas(64) float lane_values[lanes];
    hn::Store(bias_total[m], d, lane_values);
    for (int i = 0; i < lanes; ++i) dbias[m * lanes + i] += lane_values[i];
  }
  conv5x5::add_unpacked(dweight, packed_dweight, C);
}

}  // namespace
}  // namespace cnnbench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "layers/kernel_dispatch.h"

namespace cnnbench {

HWY_EXPORT(c2_backward);

std::size_t conv5x5_to16_scratch_floats(int C) {
  return 2 * std::size_t(C) * conv5x5::taps * conv5x5::channels;
}

void conv5x5_to16_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                           const float* inp, const float* weight, int B, int C, int H, int W,
                           float* scratch) {
  conv5x5::check_sixteen_shape(C, H, W);
  CNNBENCH_DISPATCH(conv_backward, c2_backward)(dinp, dweight, dbias, dout, inp, weight, B, C, H, W, scratch);
}

}  // namespace cnnbench
#endif  // HWY_ONCE
