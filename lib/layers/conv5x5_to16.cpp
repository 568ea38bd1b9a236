// Direct 5x5 convolution of LeNet-5's c2 (C input channels, no padding, 16 output channels),
// without im2col, compiled once per SIMD target (Google Highway): vectorised along the 16 output
// channels, stored channels-last, with blocks sized from the target's lanes and registers
// (conv5x5-inl.h). The forward pass comes with and without ReLU.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "layers/conv5x5_to16.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "layers/conv5x5-inl.h"
#include "layers/simd-inl.h"

#ifndef CNNBENCH_LAYERS_CONV5X5_TO16_ONCE
#define CNNBENCH_LAYERS_CONV5X5_TO16_ONCE
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <utility>

#include "cnnbench/core.hpp"
#include "cnnbench/layers.hpp"

namespace cnnbench::conv5x5 {

inline void check_sixteen_shape(int C, int H, int W) {
  CNNBENCH_CHECK(C > 0 && H >= 5 && W >= 5,
                 "conv5x5_to16: needs an image of at least 5x5 and one channel (got " +
                     std::to_string(C) + "x" + std::to_string(H) + "x" + std::to_string(W) + ")");
}

// weight (16,C,5,5) -> packed (C,5,5,16): the 16 output channels of one tap are contiguous.
inline void pack_channels_last(float* packed, const float* weight, int C) {
  for (int k = 0; k < channels; ++k) {
    for (int c = 0; c < C; ++c) {
      for (int t = 0; t < taps; ++t) {
        packed[(c * taps + t) * channels + k] = weight[(k * C + c) * taps + t];
      }
    }
  }
}

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

// dinp by planes, for images at most 16 wide and 24 high (the buffers' sizes): dout turned
// channels first, each pixel row zero-padded to whole vectors, then per input channel 25 planes,
// one per tap, each a product of depth 16 over the pixels (exactly the counted work, no zero
// taps), and the input gradient as the sum of the planes shifted by their taps.
constexpr int max_width_by_planes = 16;
constexpr int max_rows_by_planes = 24;
// Pixels of dout at the largest shape, rounded up to whole vectors of any target.
constexpr int max_plane_floats = 256;
// A row of the shifted sum reads up to 4 floats before its plane and up to 15 past its end.
constexpr int plane_margin = 16;

struct DoutPlanes {  // (16, stride): dout channels first
  alignas(64) float at[channels * max_plane_floats];
};
struct TapPlanes {  // (25, stride) of one input channel, between two margins
  alignas(64) float at[plane_margin + taps * max_plane_floats + plane_margin];
  float* first() { return at + plane_margin; }
};

// Rows of `stride` floats: the padding past each dout row and the margins around the tap planes
// (the products write the padding of the tap planes, zero).
inline void clear_plane_padding(DoutPlanes& dout_planes, TapPlanes& tap_planes, int pixels,
                                int stride) {
  for (int k = 0; k < channels; ++k) {
    std::fill(dout_planes.at + k * stride + pixels, dout_planes.at + (k + 1) * stride, 0.0f);
  }
  std::fill_n(tap_planes.at, plane_margin, 0.0f);
  std::fill_n(tap_planes.first() + taps * stride, plane_margin, 0.0f);
}

inline void fill_dout_planes(DoutPlanes& dout_planes, const float* dout, int pixels, int stride) {
  for (int p = 0; p < pixels; ++p) {
    for (int k = 0; k < channels; ++k) {
      dout_planes.at[k * stride + p] = dout[std::size_t(p) * channels + k];
    }
  }
}

}  // namespace cnnbench::conv5x5
#endif  // CNNBENCH_LAYERS_CONV5X5_TO16_ONCE

HWY_BEFORE_NAMESPACE();
namespace cnnbench::HWY_NAMESPACE {
namespace {

using conv5x5::channels;
using conv5x5::taps;

// --- c2: C input channels, no padding, 16 output channels as 16/lanes vectors -----------------

constexpr int channel_vectors = channels / lanes;  // 1 (AVX-512), 2 (AVX2), 4 (SSE4, NEON)

// Forward: N adjacent output pixels x channel_vectors accumulators, with one tap's weight vectors
// and a broadcast pixel beside them. AVX-512 12 (used as 10), AVX2 6 (5), SSE4 2, NEON 6 (5).
constexpr int c2_max_pixels() {
  for (int n = 12; n > 1; --n) {
    if (fits(n * channel_vectors, channel_vectors + 1)) return n;
  }
  return 1;
}

// N adjacent output pixels from (y, x0): out_at = out + (y Wo + x0) 16, inp_at = inp + y W + x0.
template <int N, bool Relu>
HWY_NOINLINE void c2_pixels(float* out_at, const float* inp_at, const float* packed,
                            const float* bias, int C, int H, int W) {
  constexpr int M = channel_vectors;
  const FloatTag d;
  FloatVec acc[N][M];
#pragma GCC unroll 4
  for (int m = 0; m < M; ++m) {
    const FloatVec b = hn::LoadU(d, bias + m * lanes);
#pragma GCC unroll 12
    for (int n = 0; n < N; ++n) acc[n][m] = b;
  }
  for (int c = 0; c < C; ++c) {
    for (int ky = 0; ky < 5; ++ky) {
      const float* row = inp_at + (std::size_t(c) * H + ky) * W;
      const float* w = packed + (c * taps + ky * 5) * channels;
#pragma GCC unroll 5
      for (int kx = 0; kx < 5; ++kx) {
        FloatVec wv[M];
#pragma GCC unroll 4
        for (int m = 0; m < M; ++m) wv[m] = hn::LoadU(d, w + kx * channels + m * lanes);
#pragma GCC unroll 12
        for (int n = 0; n < N; ++n) {
          const FloatVec pixel = hn::Set(d, row[n + kx]);
#pragma GCC unroll 4
          for (int m = 0; m < M; ++m) acc[n][m] = hn::MulAdd(wv[m], pixel, acc[n][m]);
        }
      }
    }
  }
#pragma GCC unroll 12
  for (int n = 0; n < N; ++n) {
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
      hn::StoreU(Relu ? relu(acc[n][m]) : acc[n][m], d, out_at + n * channels + m * lanes);
    }
  }
}

using PixelBlock = void (*)(float*, const float*, const float*, const float*, int, int, int);

template <bool Relu, int... N>
constexpr std::array<PixelBlock, sizeof...(N)> pixel_blocks(std::integer_sequence<int, N...>) {
  return {&c2_pixels<N + 1, Relu>...};
}

template <bool Relu>
void c2_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int C,
                int H, int W, float* scratch) {
  constexpr int max_pixels = c2_max_pixels();
  static constexpr auto blocks =
      pixel_blocks<Relu>(std::make_integer_sequence<int, max_pixels>());
  conv5x5::pack_channels_last(scratch, weight, C);
  const int Ho = H - 4, Wo = W - 4;
  // Each row in equal blocks (10 = 5 + 5 rather than 6 + 4).
  const int row_blocks = (Wo + max_pixels - 1) / max_pixels;
  const int per_block = (Wo + row_blocks - 1) / row_blocks;
  for (int b = 0; b < B; ++b) {
    const float* inp_b = inp + std::size_t(b) * C * H * W;
    float* out_b = out + std::size_t(b) * Ho * Wo * channels;
    for (int y = 0; y < Ho; ++y) {
      for (int x = 0; x < Wo; x += per_block) {
        const int n = std::min(per_block, Wo - x);
        blocks[std::size_t(n - 1)](out_b + (std::size_t(y) * Wo + x) * channels,
                                   inp_b + std::size_t(y) * W + x, scratch, bias, C, H, W);
      }
    }
  }
}

void c2_forward_relu(float* out, const float* inp, const float* weight, const float* bias, int B,
                     int C, int H, int W, float* scratch) {
  c2_forward<true>(out, inp, weight, bias, B, C, H, W, scratch);
}
void c2_forward_linear(float* out, const float* inp, const float* weight, const float* bias, int B,
                       int C, int H, int W, float* scratch) {
  c2_forward<false>(out, inp, weight, bias, B, C, H, W, scratch);
}

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

// Input gradient by planes (W <= 16, H <= 24). plane[tap][p] = sum over the 16 kernels k of
// w[k][c][tap] * dout[k][p], in blocks of MB taps x PB vectors of pixels: the accumulators with
// PB dout vectors and a broadcast weight beside them. Against the rows of input pixels that the
// taps reach (each row one vector, 5 taps a row, on 14 pixels of which 10 have dout), the
// products do no work on zero padding: 208 lanes for two samples of LeNet-5's 100 pixels on
// AVX-512, where the rows did 1.6x the counted multiply-adds (the whole input gradient at batch
// 64 on avx3: 205 -> 163 us).
constexpr int plane_taps_for(int PB) {
  for (int mb = 6; mb > 1; --mb) {
    if (fits(mb * PB, PB + 1)) return mb;
  }
  return 1;
}
// The widest block in which each dout vector still serves 3 taps: AVX-512 and NEON 7 vectors
// (3 taps), AVX2 and SSE4 3 (4 and 3 taps).
constexpr int max_plane_vectors() {
  int widest = 1;
  for (int pb = 2; pb <= 12; ++pb) {
    if (plane_taps_for(pb) >= 3) widest = pb;
  }
  return widest;
}

// planes (MB rows) = w (MB taps, 16 kernels each) x dout_planes (16 rows), PB vectors of each
// row from the block's first one; both kinds of row are `stride` floats apart.
template <int MB, int PB>
HWY_NOINLINE void tap_plane_block(float* planes, const float* dout_planes, const float* w,
                                  int stride) {
  const FloatTag d;
  FloatVec acc[MB][PB];
#pragma GCC unroll 6
  for (int m = 0; m < MB; ++m) {
#pragma GCC unroll 12
    for (int i = 0; i < PB; ++i) acc[m][i] = hn::Zero(d);
  }
  for (int k = 0; k < channels; ++k) {
    FloatVec dv[PB];
#pragma GCC unroll 12
    for (int i = 0; i < PB; ++i) {
      dv[i] = hn::LoadU(d, dout_planes + k * stride + i * lanes);
      keep_in_register(dv[i]);  // one load for the MB taps
    }
#pragma GCC unroll 6
    for (int m = 0; m < MB; ++m) {
      const FloatVec wv = hn::Set(d, w[m * channels + k]);
#pragma GCC unroll 12
      for (int i = 0; i < PB; ++i) acc[m][i] = hn::MulAdd(wv, dv[i], acc[m][i]);
    }
  }
#pragma GCC unroll 6
  for (int m = 0; m < MB; ++m) {
#pragma GCC unroll 12
    for (int i = 0; i < PB; ++i) hn::StoreU(acc[m][i], d, planes + m * stride + i * lanes);
  }
}

// `rows` tap planes in blocks of MB, the rest in one smaller block.
template <int PB, int MB = plane_taps_for(PB)>
void tap_plane_rows(float* planes, const float* dout_planes, const float* w, int rows,
                    int stride) {
  int t = 0;
  for (; t + MB <= rows; t += MB) {
    tap_plane_block<MB, PB>(planes + t * stride, dout_planes, w + t * channels, stride);
  }
  if constexpr (MB > 1) {
    if (t < rows) {
      tap_plane_rows<PB, MB - 1>(planes + t * stride, dout_planes, w + t * channels, rows - t,
                                 stride);
    }
  }
}

using TapPlaneRows = void (*)(float*, const float*, const float*, int, int);
template <int... PB>
constexpr std::array<TapPlaneRows, sizeof...(PB)> tap_plane_widths(
    std::integer_sequence<int, PB...>) {
  return {&tap_plane_rows<PB + 1>...};
}

// The 25 tap planes of input channel c (packed_c: its 25 taps x 16 kernels), the pixels' vectors
// in blocks of at most max_plane_vectors() whose sizes differ by one at most.
void tap_planes(float* planes, const float* dout_planes, const float* packed_c, int pixels,
                int stride) {
  static constexpr auto widths =
      tap_plane_widths(std::make_integer_sequence<int, max_plane_vectors()>());
  const int vectors = (pixels + lanes - 1) / lanes;
  const int blocks = (vectors + max_plane_vectors() - 1) / max_plane_vectors();
  for (int b = 0, v = 0; b < blocks; ++b) {
    const int width = vectors / blocks + (b < vectors % blocks ? 1 : 0);
    widths[std::size_t(width - 1)](planes + v * lanes, dout_planes + v * lanes, packed_c, taps,
                                   stride);
    v += width;
  }
}

// Each input row is dinp_row_vectors vectors at x = 0, lanes, ..., moved left to W - lanes
// where the row ends (overlapping) or, for rows narrower than a vector, one vector stored in
// part; tap kx of the vector at x0 takes lane l from pixel x0 + l - kx of a dout row where that
// is in [0, Wo).
constexpr int dinp_row_vectors = conv5x5::max_width_by_planes / lanes;  // 1, 2 or 4
HWY_INLINE int dinp_vector_x(int v, int W) { return std::min(v * lanes, std::max(W - lanes, 0)); }
using TapMasks = hn::Mask<FloatTag>[dinp_row_vectors][5];

void make_tap_masks(TapMasks& in_row, int W) {
  const FloatTag d;
  const FloatVec Wo = hn::Set(d, float(W - 4));
  for (int v = 0; v < dinp_row_vectors; ++v) {
    for (int kx = 0; kx < 5; ++kx) {
      const FloatVec at = hn::Iota(d, float(dinp_vector_x(v, W) - kx));
      in_row[v][kx] = hn::And(hn::Ge(at, hn::Zero(d)), hn::Lt(at, Wo));
    }
  }
}

// dinp_c (H, W) = sum over taps of the tap planes shifted by (ky, kx): one accumulator per kx,
// kernel rows whose dout row is outside the image left out. Tap (ky, kx) of input row iy reads
// plane ky 5 + kx at dout row iy - ky, kx pixels to the left: planes + iy Wo + x0 + ky next_ky +
// kx next_kx, one pointer stepped along the kernel rows (indexing each tap separately, the
// address arithmetic outnumbered the loads).
void dinp_from_tap_planes(float* dinp_c, const float* planes, const TapMasks& in_row, int H, int W,
                          int stride) {
  const FloatTag d;
  const int Ho = H - 4, Wo = W - 4;
  const std::ptrdiff_t next_ky = 5 * stride - Wo, next_kx = stride - 1;
  for (int v = 0; v < dinp_row_vectors; ++v) {
    const int x0 = dinp_vector_x(v, W);
    hn::Mask<FloatTag> in[5];
#pragma GCC unroll 5
    for (int kx = 0; kx < 5; ++kx) in[kx] = in_row[v][kx];
    for (int iy = 0; iy < H; ++iy) {
      const int ky_first = std::max(0, iy - Ho + 1), ky_last = std::min(4, iy);
      const float* at = planes + iy * Wo + x0 + ky_first * next_ky;
      FloatVec acc[5];
#pragma GCC unroll 5
      for (int kx = 0; kx < 5; ++kx) acc[kx] = hn::Zero(d);
      for (int ky = ky_first; ky <= ky_last; ++ky, at += next_ky) {
#pragma GCC unroll 5
        for (int kx = 0; kx < 5; ++kx) {
          acc[kx] = hn::Add(acc[kx], hn::IfThenElseZero(in[kx], hn::LoadU(d, at + kx * next_kx)));
        }
      }
      const FloatVec sum = hn::Add(hn::Add(hn::Add(acc[0], acc[1]), hn::Add(acc[2], acc[3])),
                                   acc[4]);
      store_first(dinp_c + iy * W + x0, sum, std::min(lanes, W - x0));
    }
  }
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// r (16 x 16) transposed in registers: unpacks within 128-bit blocks, then block shuffles.
HWY_INLINE void transpose_16x16(__m512 (&r)[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) {
      t[8 * i + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + j + 4], 0x88);
      t[8 * i + j + 4] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + j + 4], 0xdd);
    }
  }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
  }
}
#endif

// dout (pixels, 16) -> dout_planes (16, stride). On AVX-512, 16 pixels at a time transposed in
// registers (pixels past the last one as zeros, the rows' padding): one float at a time, it
// took a tenth of the input gradient's time (about 20 us of LeNet-5's c2 at batch 64 on avx3).
void dout_channels_first(conv5x5::DoutPlanes& dout_planes, const float* dout, int pixels,
                         int stride) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  for (int p0 = 0; p0 < pixels; p0 += 16) {
    __m512 r[16];
    for (int i = 0; i < 16; ++i) {
      r[i] = p0 + i < pixels ? _mm512_loadu_ps(dout + std::size_t(p0 + i) * channels)
                             : _mm512_setzero_ps();
    }
    transpose_16x16(r);
    for (int k = 0; k < channels; ++k) _mm512_storeu_ps(dout_planes.at + k * stride + p0, r[k]);
  }
#else
  conv5x5::fill_dout_planes(dout_planes, dout, pixels, stride);
#endif
}

// The input gradients of `samples` consecutive samples, whose dout pixels the products take as
// one row: LeNet-5's two samples of 100 pixels are 13 vectors on AVX-512 instead of 2 x 7.
void c2_input_gradient_by_planes(float* dinp_b, const float* dout_b, const float* packed,
                                 int samples, int C, int H, int W, const TapMasks& in_row,
                                 conv5x5::DoutPlanes& dout_planes,
                                 conv5x5::TapPlanes& tap_planes_c) {
  const int sample_pixels = (H - 4) * (W - 4), pixels = samples * sample_pixels;
  const int stride = (pixels + lanes - 1) / lanes * lanes;
  conv5x5::clear_plane_padding(dout_planes, tap_planes_c, pixels, stride);
  dout_channels_first(dout_planes, dout_b, pixels, stride);
  for (int c = 0; c < C; ++c) {
    tap_planes(tap_planes_c.first(), dout_planes.at, packed + c * taps * channels, pixels,
               stride);
    for (int s = 0; s < samples; ++s) {
      dinp_from_tap_planes(dinp_b + (std::size_t(s) * C + c) * H * W,
                           tap_planes_c.first() + s * sample_pixels, in_row, H, W, stride);
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

HWY_EXPORT(c2_forward_relu);
HWY_EXPORT(c2_forward_linear);
HWY_EXPORT(c2_backward);

std::size_t conv5x5_to16_scratch_floats(int C) {
  return 2 * std::size_t(C) * conv5x5::taps * conv5x5::channels;
}

void conv5x5_to16_relu_forward(float* out, const float* inp, const float* weight,
                               const float* bias, int B, int C, int H, int W, float* scratch) {
  conv5x5::check_sixteen_shape(C, H, W);
  CNNBENCH_DISPATCH(conv_forward, c2_forward_relu)(out, inp, weight, bias, B, C, H, W, scratch);
}

void conv5x5_to16_forward(float* out, const float* inp, const float* weight, const float* bias,
                          int B, int C, int H, int W, float* scratch) {
  conv5x5::check_sixteen_shape(C, H, W);
  CNNBENCH_DISPATCH(conv_forward, c2_forward_linear)(out, inp, weight, bias, B, C, H, W, scratch);
}

void conv5x5_to16_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                           const float* inp, const float* weight, int B, int C, int H, int W,
                           float* scratch) {
  conv5x5::check_sixteen_shape(C, H, W);
  CNNBENCH_DISPATCH(conv_backward, c2_backward)(dinp, dweight, dbias, dout, inp, weight, B, C, H, W, scratch);
}

}  // namespace cnnbench
#endif  // HWY_ONCE
