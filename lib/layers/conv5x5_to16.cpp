// The forward pass of LeNet-5's c2 as a direct 5x5 convolution (C input channels, no padding, 16
// output channels), without im2col, compiled once per SIMD target (Google Highway): vectorised
// along the 16 output channels, stored channels-last, with blocks of output pixels sized from the
// target's lanes and registers (conv5x5-inl.h). It comes with and without ReLU; the backward pass
// is conv5x5_to16_backward.cpp.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "layers/conv5x5_to16.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "layers/conv5x5-inl.h"
#include "layers/conv5x5_to16-inl.h"
#include "layers/simd-inl.h"

#ifndef CNNBENCH_LAYERS_CONV5X5_TO16_ONCE
#define CNNBENCH_LAYERS_CONV5X5_TO16_ONCE
#include <algorithm>
#include <array>
#include <cstddef>
#include <utility>

#include "cnnbench/layers.hpp"
#endif  // CNNBENCH_LAYERS_CONV5X5_TO16_ONCE

HWY_BEFORE_NAMESPACE();
namespace cnnbench::HWY_NAMESPACE {
namespace {

using conv5x5::channels;
using conv5x5::taps;

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

}  // namespace
}  // namespace cnnbench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "layers/kernel_dispatch.h"

namespace cnnbench {

HWY_EXPORT(c2_forward_relu);
HWY_EXPORT(c2_forward_linear);

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

}  // namespace cnnbench
#endif  // HWY_ONCE
