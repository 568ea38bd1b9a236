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

// dinp by rows, for images at most 16 wide and 24 high: dout turned channels first into a tile
// zero-padded by 4 on every side, so that each input row is 16/lanes vectors and every tap is
// one unaligned load with no bounds test. Width: 16 + the largest tap offset.
constexpr int tile_pad = 4;
constexpr int max_width_by_rows = 16;
constexpr int max_rows_by_rows = 24;
constexpr int tile_width = max_width_by_rows + tile_pad;

struct DoutTile {
  alignas(64) float at[channels][max_rows_by_rows + 2 * tile_pad][tile_width];
};

// The zero border is written once per call; each sample overwrites only the Ho x Wo interior.
inline void clear_dout_tile(DoutTile& tile, int Ho) {
  const int rows = Ho + 2 * tile_pad;
  for (int k = 0; k < channels; ++k) std::memset(tile.at[k], 0, sizeof(float) * tile_width * rows);
}

inline void fill_dout_tile(DoutTile& tile, const float* dout, int Ho, int Wo) {
  for (int y = 0; y < Ho; ++y) {
    for (int x = 0; x < Wo; ++x) {
      const float* pixel = dout + (std::size_t(y) * Wo + x) * channels;
      for (int k = 0; k < channels; ++k) tile.at[k][y + tile_pad][x + tile_pad] = pixel[k];
    }
  }
}

}  // namespace cnnbench::conv5x5
#endif  // CNNBENCH_LAYERS_CONV5X5_TO16_ONCE

HWY_BEFORE_NAMESPACE();
namespace cnnbench::HWY_NAMESPACE {
namespace {

using conv5x5::channels;
using conv5x5::DoutTile;
using conv5x5::taps;
using conv5x5::tile_pad;

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

// Input gradient by rows (W <= 16): dinp[c][iy][ix] = sum over kernels k and taps of
// w[k][c][ky][kx] * tile[k][iy-ky][ix-kx], ix along the lanes. Each input row is row_vectors
// vectors at x = 0, lanes, ..., moved left to W - lanes where the row ends (overlapping) or, for
// rows narrower than a vector, one vector stored in part.
constexpr int dinp_row_vectors = conv5x5::max_width_by_rows / lanes;  // 1, 2 or 4
HWY_INLINE int dinp_vector_x(int v, int W) { return std::min(v * lanes, std::max(W - lanes, 0)); }

// Blocks of R rows x CB channels x row_vectors accumulators with CB weights and one dout vector
// beside them, the most channels first: AVX-512 4 x 6, AVX2 2 x 3, SSE4 1 x 2, NEON 1 x 6;
// single channels as many rows as fit.
constexpr int dinp_rows_for(int CB) {
  int rows = 1;  // also on targets too narrow for any block (HWY_SCALAR)
  for (int r = 2; r <= 8; ++r) {
    if (fits(r * CB * dinp_row_vectors, CB + 1)) rows = r;
  }
  return rows;
}
constexpr int dinp_channel_block() {
  for (int cb : {6, 3, 2}) {
    if (fits(cb * dinp_row_vectors, cb + 1)) return cb;
  }
  return 1;
}

// Input rows [iy, iy+R) of channels [c0, c0+CB): each tap's weights are shared by the R rows and
// each dout vector by the CB channels.
template <int CB, int R>
HWY_NOINLINE void dinp_rows(float* dinp_b, const DoutTile& tile, const float* weight, int C, int c0,
                            int H, int W, int iy) {
  constexpr int V = dinp_row_vectors;
  const FloatTag d;
  int x[V];
  for (int v = 0; v < V; ++v) x[v] = dinp_vector_x(v, W) + tile_pad;
  FloatVec acc[R][V][CB];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
#pragma GCC unroll 6
      for (int j = 0; j < CB; ++j) acc[r][v][j] = hn::Zero(d);
    }
  }
  // Kernel rows whose dout rows (iy + r - ky) all lie in the tile's zero border add nothing.
  const int Ho = H - 4;
  const int ky_first = std::max(0, iy - Ho + 1), ky_last = std::min(4, iy + R - 1);
  for (int k = 0; k < channels; ++k) {
    for (int ky = ky_first; ky <= ky_last; ++ky) {
      const float* w = weight + (std::size_t(k) * C + c0) * taps + ky * 5;
      // Opaque: tap (r, ky) reads what (r + 1, ky + 1) does (see opaque).
      const float* rows = opaque(tile.at[k][iy - ky + tile_pad]);
      // Rows of the block whose dout row iy + r - ky is in the image (bit r): the others would
      // read the tile's zero border. Near the top and bottom that skips a sixth of the block's
      // multiply-adds (c2's input gradient at batch 64 on avx3: 262 -> 189 us); the branches repeat
      // for every k and predict well. Blocks of 1 or 2 rows go without: ky_first and ky_last
      // bound single rows already, and with the test serial LeNet-5 ran 1.5% slower on avx2
      // (2 rows) and c2's backward 1.5x slower on SSE4 (1 row).
      const int first_row = std::max(0, ky - iy), last_row = std::min(R, Ho + ky - iy);
      const unsigned rows_with_data = (1u << last_row) - (1u << first_row);
#pragma GCC unroll 5
      for (int kx = 0; kx < 5; ++kx) {
        FloatVec wv[CB];
        broadcast_tap(wv, w, kx);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          if constexpr (R >= 3) {
            if (!(rows_with_data >> r & 1u)) continue;
          }
#pragma GCC unroll 4
          for (int v = 0; v < V; ++v) {
            const FloatVec dv = hn::LoadU(d, rows + r * conv5x5::tile_width + x[v] - kx);
#pragma GCC unroll 6
            for (int j = 0; j < CB; ++j) acc[r][v][j] = hn::MulAdd(wv[j], dv, acc[r][v][j]);
          }
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < CB; ++j) {
      float* dst = dinp_b + (std::size_t(c0 + j) * H + iy + r) * W;
      for (int v = 0; v < V; ++v) {
        const int at = x[v] - tile_pad;
        store_first(dst + at, acc[r][v][j], std::min(lanes, W - at));
      }
    }
  }
}

// Rows [iy, H) in blocks of R, the last block as many rows as are left.
template <int CB, int R>
void dinp_channels(float* dinp_b, const DoutTile& tile, const float* weight, int C, int c0, int H,
                   int W, int iy = 0) {
  for (; iy + R <= H; iy += R) dinp_rows<CB, R>(dinp_b, tile, weight, C, c0, H, W, iy);
  if constexpr (R > 1) {
    if (iy < H) dinp_channels<CB, R - 1>(dinp_b, tile, weight, C, c0, H, W, iy);
  }
}

void c2_input_gradient_by_rows(float* dinp_b, const float* dout_b, const float* weight, int C,
                               int H, int W, DoutTile& tile) {
  constexpr int CB = dinp_channel_block(), R = dinp_rows_for(CB);
  conv5x5::fill_dout_tile(tile, dout_b, H - 4, W - 4);
  int c = 0;
  for (; c + CB <= C; c += CB) {
    dinp_channels<CB, R>(dinp_b, tile, weight, C, c, H, W);
  }
  for (; c < C; ++c) dinp_channels<1, dinp_rows_for(1)>(dinp_b, tile, weight, C, c, H, W);
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
  const bool by_rows =
      dinp && W <= conv5x5::max_width_by_rows && H <= conv5x5::max_rows_by_rows;
  DoutTile tile;  // 40 KB on the stack: no allocation in the training loop
  if (by_rows) conv5x5::clear_dout_tile(tile, Ho);
  for (int b = 0; b < B; ++b) {
    const float* dout_b = dout + std::size_t(b) * Ho * Wo * channels;
    const float* inp_b = inp + std::size_t(b) * C * H * W;
    if (dweight) {
      for (int p = 0; p < Ho * Wo; ++p) {
        for (int m = 0; m < M; ++m) {
          bias_total[m] = hn::Add(bias_total[m], hn::LoadU(d, dout_b + p * channels + m * lanes));
        }
      }
      c2_weight_gradient(packed_dweight, dout_b, inp_b, C, H, W);
    }
    float* dinp_b = dinp ? dinp + std::size_t(b) * C * H * W : nullptr;
    if (by_rows) {
      c2_input_gradient_by_rows(dinp_b, dout_b, weight, C, H, W, tile);
    } else if (dinp) {
      c2_input_gradient_any_shape(dinp_b, dout_b, packed, C, H, W);
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
