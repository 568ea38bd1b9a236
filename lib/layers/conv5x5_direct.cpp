// Direct 5x5 convolutions for LeNet-5's two conv layers, without im2col: c1 (one input channel,
// pad 2) vectorised along image rows, c2 (16 output channels) vectorised along those channels with
// its output stored channels-last. Both apply ReLU in the forward pass.
#include <algorithm>
#include <cstring>
#include <string>

#include "cnnbench/core.hpp"
#include "cnnbench/layers.hpp"
#include "vector16.hpp"

namespace cnnbench {

namespace {

using simd::f16;
constexpr int taps = 25;  // 5x5
constexpr int lanes = 16;

// --- c1: one input channel, pad 2, rows of 16..28 pixels --------------------------------------

// One plane zero-padded by 2 on every side into a 32x32 tile, so that both row vectors (at x = 0
// and at x = W-16) of every tap read inside the tile.
struct PaddedPlane {
  alignas(64) float at[32][32];
};

void pad_plane(PaddedPlane& tile, const float* plane, int H, int W) {
  std::memset(&tile, 0, sizeof tile);
  for (int y = 0; y < H; ++y) std::memcpy(&tile.at[y + 2][2], plane + y * W, sizeof(float) * W);
}

void check_single_channel_shape(int K, int H, int W) {
  CNNBENCH_CHECK(K > 0 && H >= 1 && H <= 28 && W >= 16 && W <= 28,
                 "conv5x5_pad2: needs 16 <= width <= 28 and height <= 28 (got " +
                     std::to_string(H) + "x" + std::to_string(W) + ", " + std::to_string(K) +
                     " kernels)");
}

// KC output channels [k0, k0+KC) of one sample: every row as two overlapping 16-wide vectors
// (x = 0 and x = W-16; the overlap is computed twice and stored twice with equal values).
template <int KC>
void single_channel_rows(float* out, const PaddedPlane& tile, const float* weight,
                         const float* bias, int k0, int H, int W) {
  const int x_high = W - lanes;
  for (int y = 0; y < H; ++y) {
    f16 low[KC], high[KC];
    for (int j = 0; j < KC; ++j) low[j] = high[j] = simd::splat(bias[k0 + j]);
    for (int ky = 0; ky < 5; ++ky) {
      const float* row = tile.at[y + ky];
      for (int kx = 0; kx < 5; ++kx) {
        f16 left = simd::load(row + kx), right = simd::load(row + x_high + kx);
        // Narrow blocks: one load per row vector (see input_gradient_rows).
        if constexpr (KC < 6) {
          simd::keep_in_register(left);
          simd::keep_in_register(right);
        }
        for (int j = 0; j < KC; ++j) {
          const float w = weight[(k0 + j) * taps + ky * 5 + kx];
          low[j] += w * left;
          high[j] += w * right;
        }
      }
    }
    for (int j = 0; j < KC; ++j) {
      float* dst = out + (std::size_t(k0 + j) * H + y) * W;
      simd::store(dst, simd::relu(low[j]));
      simd::store(dst + x_high, simd::relu(high[j]));
    }
  }
}

// dweight/dbias of KC output channels over the whole batch, kept as per-lane partial sums
// (total) until the end so that each tap is reduced across lanes once.
template <int KC>
void single_channel_weight_gradients(float* dweight, float* dbias, const float* dout,
                                     const float* inp, int k0, int B, int K, int H, int W) {
  const int x_high = W - lanes;
  // The second row vector re-reads x in [W-16, 16): those lanes are masked out.
  f16 high_mask;
  for (int i = 0; i < lanes; ++i) high_mask[i] = x_high + i >= lanes ? 1.0f : 0.0f;
  f16 total[KC][taps] = {};
  f16 bias_total[KC] = {};
  PaddedPlane tile;
  for (int b = 0; b < B; ++b) {
    pad_plane(tile, inp + std::size_t(b) * H * W, H, W);
    const float* dout_b = dout + std::size_t(b) * K * H * W;
    for (int ky = 0; ky < 5; ++ky) {
      f16 acc[KC][5] = {};
      for (int y = 0; y < H; ++y) {
        const float* row = tile.at[y + ky];
        for (int half = 0; half < 2; ++half) {
          const int x0 = half == 0 ? 0 : x_high;
          f16 d[KC];
          for (int j = 0; j < KC; ++j) {
            d[j] = simd::load(dout_b + (std::size_t(k0 + j) * H + y) * W + x0);
            if (half == 1) d[j] *= high_mask;
            if (ky == 0) bias_total[j] += d[j];
          }
          for (int kx = 0; kx < 5; ++kx) {
            const f16 pixels = simd::load(row + x0 + kx);
            for (int j = 0; j < KC; ++j) acc[j][kx] += d[j] * pixels;
          }
        }
      }
      for (int j = 0; j < KC; ++j) {
        for (int kx = 0; kx < 5; ++kx) total[j][ky * 5 + kx] += acc[j][kx];
      }
    }
  }
  for (int j = 0; j < KC; ++j) {
    for (int t = 0; t < taps; ++t) dweight[(k0 + j) * taps + t] += simd::sum(total[j][t]);
    dbias[k0 + j] += simd::sum(bias_total[j]);
  }
}

// --- c2: C input channels, no padding, 16 output channels as one vector -----------------------

void check_sixteen_shape(int C, int H, int W) {
  CNNBENCH_CHECK(C > 0 && H >= 5 && W >= 5,
                 "conv5x5_to16: needs an image of at least 5x5 and one channel (got " +
                     std::to_string(C) + "x" + std::to_string(H) + "x" + std::to_string(W) + ")");
}

// weight (16,C,5,5) -> packed (C,5,5,16): the 16 output channels of one tap are one vector.
void pack_channels_last(float* packed, const float* weight, int C) {
  for (int k = 0; k < lanes; ++k) {
    for (int c = 0; c < C; ++c) {
      for (int t = 0; t < taps; ++t) packed[(c * taps + t) * lanes + k] = weight[(k * C + c) * taps + t];
    }
  }
}

// N adjacent output pixels of row y: N accumulators of 16 channels, each tap one weight vector
// times N broadcast input pixels.
template <int N, bool Relu>
void sixteen_pixels(float* out, const float* inp, const float* packed, f16 bias, int C, int H,
                    int W, int y, int x0) {
  f16 acc[N];
  for (int n = 0; n < N; ++n) acc[n] = bias;
  for (int c = 0; c < C; ++c) {
    for (int ky = 0; ky < 5; ++ky) {
      const float* row = inp + (std::size_t(c) * H + y + ky) * W + x0;
      for (int kx = 0; kx < 5; ++kx) {
        const f16 w = simd::load(packed + (c * taps + ky * 5 + kx) * lanes);
        for (int n = 0; n < N; ++n) acc[n] += w * row[n + kx];
      }
    }
  }
  const int Wo = W - 4;
  for (int n = 0; n < N; ++n) {
    simd::store(out + (std::size_t(y) * Wo + x0 + n) * lanes, Relu ? simd::relu(acc[n]) : acc[n]);
  }
}

// dinp of CB input channels [c0, c0+CB) of one sample: per input pixel, the 16-channel products
// of every tap that reaches it, summed across lanes once at the end.
template <int CB>
void sixteen_input_gradient(float* dinp, const float* dout, const float* packed, int c0, int H,
                            int W) {
  const int Ho = H - 4, Wo = W - 4;
  for (int iy = 0; iy < H; ++iy) {
    const int ky_first = std::max(0, iy - Ho + 1), ky_last = std::min(4, iy);
    for (int ix = 0; ix < W; ++ix) {
      const int kx_first = std::max(0, ix - Wo + 1), kx_last = std::min(4, ix);
      f16 acc[CB] = {};
      for (int ky = ky_first; ky <= ky_last; ++ky) {
        for (int kx = kx_first; kx <= kx_last; ++kx) {
          const f16 d = simd::load(dout + (std::size_t(iy - ky) * Wo + ix - kx) * lanes);
          for (int j = 0; j < CB; ++j) {
            acc[j] += d * simd::load(packed + ((c0 + j) * taps + ky * 5 + kx) * lanes);
          }
        }
      }
      for (int j = 0; j < CB; ++j) dinp[(std::size_t(c0 + j) * H + iy) * W + ix] = simd::sum(acc[j]);
    }
  }
}

// dinp of one sample by rows, for images at most 16 wide: dinp[c][iy][ix] = sum over kernels k
// and taps of w[k][c][ky][kx] * dout[iy-ky][ix-kx][k], with ix along the 16 lanes. dout is first
// turned channels first into a tile zero-padded by 4 on every side, so every tap reads one
// unaligned row vector and no pixel needs a bounds test or a sum across lanes.
constexpr int tile_pad = 4;
constexpr int tile_width = lanes + tile_pad;  // lanes + the largest tap offset
constexpr int max_rows_by_rows = 24;          // input rows this path takes (the tile is on the stack)

struct DoutTile {
  alignas(64) float at[lanes][max_rows_by_rows + 2 * tile_pad][tile_width];
};

// The zero border is written once per call (clear_dout_tile); each sample then overwrites only
// the Ho x Wo interior of each of the 16 planes.
void clear_dout_tile(DoutTile& tile, int Ho) {
  const int rows = Ho + 2 * tile_pad;
  for (int k = 0; k < lanes; ++k) std::memset(tile.at[k], 0, sizeof(float) * tile_width * rows);
}

void fill_dout_tile(DoutTile& tile, const float* dout, int Ho, int Wo) {
  for (int y = 0; y < Ho; ++y) {
    for (int x = 0; x < Wo; ++x) {
      const f16 pixel = simd::load(dout + (std::size_t(y) * Wo + x) * lanes);
      for (int k = 0; k < lanes; ++k) tile.at[k][y + tile_pad][x + tile_pad] = pixel[k];
    }
  }
}

// R input rows [iy, iy+R) of CB channels [c0, c0+CB): R x CB accumulators; each tap's weights
// are shared by the R rows and each dout row vector by the CB channels.
template <int CB, int R>
void input_gradient_rows(float* dinp, const DoutTile& tile, const float* weight, int C, int c0,
                         int H, int W, int iy) {
  f16 acc[R][CB] = {};
  for (int k = 0; k < lanes; ++k) {
    for (int ky = 0; ky < 5; ++ky) {
      for (int kx = 0; kx < 5; ++kx) {
        float w[CB];
        for (int j = 0; j < CB; ++j) w[j] = weight[(std::size_t(k) * C + c0 + j) * taps + ky * 5 + kx];
        for (int r = 0; r < R; ++r) {
          f16 d = simd::load(&tile.at[k][iy + r - ky + tile_pad][tile_pad - kx]);
          // Narrow blocks: one load per row vector. Without this GCC folds the load into each
          // of the CB multiply-adds and the kernel turns load-bound (1.5x slower at CB = 3).
          if constexpr (CB < 6) simd::keep_in_register(d);
          for (int j = 0; j < CB; ++j) acc[r][j] += w[j] * d;
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < CB; ++j) {
      float row[lanes];
      simd::store(row, acc[r][j]);
      std::memcpy(dinp + (std::size_t(c0 + j) * H + iy + r) * W, row, sizeof(float) * W);
    }
  }
}

template <int CB>
void input_gradient_channels(float* dinp, const DoutTile& tile, const float* weight, int C,
                             int c0, int H, int W) {
  constexpr int rows = CB >= 6 ? 2 : CB >= 3 ? 4 : 7;  // R x CB accumulators fit the 32 registers
  int iy = 0;
  for (; iy + rows <= H; iy += rows) input_gradient_rows<CB, rows>(dinp, tile, weight, C, c0, H, W, iy);
  for (; iy < H; ++iy) input_gradient_rows<CB, 1>(dinp, tile, weight, C, c0, H, W, iy);
}

void sixteen_input_gradient_by_rows(float* dinp, const float* dout, const float* weight, int C,
                                    int H, int W, DoutTile& tile) {
  fill_dout_tile(tile, dout, H - 4, W - 4);
  int c = 0;
  for (; c + 6 <= C; c += 6) input_gradient_channels<6>(dinp, tile, weight, C, c, H, W);
  for (; c + 3 <= C; c += 3) input_gradient_channels<3>(dinp, tile, weight, C, c, H, W);
  for (; c < C; ++c) input_gradient_channels<1>(dinp, tile, weight, C, c, H, W);
}

}  // namespace

void conv5x5_pad2_relu_forward(float* out, const float* inp, const float* weight,
                               const float* bias, int B, int K, int H, int W) {
  check_single_channel_shape(K, H, W);
  PaddedPlane tile;
  for (int b = 0; b < B; ++b) {
    pad_plane(tile, inp + std::size_t(b) * H * W, H, W);
    float* out_b = out + std::size_t(b) * K * H * W;
    int k = 0;
    for (; k + 6 <= K; k += 6) single_channel_rows<6>(out_b, tile, weight, bias, k, H, W);
    for (; k + 3 <= K; k += 3) single_channel_rows<3>(out_b, tile, weight, bias, k, H, W);
    for (; k + 2 <= K; k += 2) single_channel_rows<2>(out_b, tile, weight, bias, k, H, W);
    for (; k < K; ++k) single_channel_rows<1>(out_b, tile, weight, bias, k, H, W);
  }
}

void conv5x5_pad2_backward_weights(float* dweight, float* dbias, const float* dout,
                                   const float* inp, int B, int K, int H, int W) {
  check_single_channel_shape(K, H, W);
  int k = 0;
  for (; k + 3 <= K; k += 3) single_channel_weight_gradients<3>(dweight, dbias, dout, inp, k, B, K, H, W);
  for (; k < K; ++k) single_channel_weight_gradients<1>(dweight, dbias, dout, inp, k, B, K, H, W);
}

std::size_t conv5x5_to16_scratch_floats(int C) { return 2 * std::size_t(C) * taps * lanes; }

namespace {

template <bool Relu>
void sixteen_forward(float* out, const float* inp, const float* weight, const float* bias, int B,
                     int C, int H, int W, float* scratch) {
  check_sixteen_shape(C, H, W);
  pack_channels_last(scratch, weight, C);
  const f16 bias_vector = simd::load(bias);
  const int Ho = H - 4, Wo = W - 4;
  for (int b = 0; b < B; ++b) {
    const float* inp_b = inp + std::size_t(b) * C * H * W;
    float* out_b = out + std::size_t(b) * Ho * Wo * lanes;
    for (int y = 0; y < Ho; ++y) {
      int x = 0;
      for (; x + 10 <= Wo; x += 10) {
        sixteen_pixels<10, Relu>(out_b, inp_b, scratch, bias_vector, C, H, W, y, x);
      }
      for (; x < Wo; ++x) sixteen_pixels<1, Relu>(out_b, inp_b, scratch, bias_vector, C, H, W, y, x);
    }
  }
}

}  // namespace

void conv5x5_to16_relu_forward(float* out, const float* inp, const float* weight,
                               const float* bias, int B, int C, int H, int W, float* scratch) {
  sixteen_forward<true>(out, inp, weight, bias, B, C, H, W, scratch);
}

void conv5x5_to16_forward(float* out, const float* inp, const float* weight, const float* bias,
                          int B, int C, int H, int W, float* scratch) {
  sixteen_forward<false>(out, inp, weight, bias, B, C, H, W, scratch);
}

void conv5x5_to16_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                           const float* inp, const float* weight, int B, int C, int H, int W,
                           float* scratch) {
  check_sixteen_shape(C, H, W);
  float* packed = scratch;
  float* packed_dweight = scratch + std::size_t(C) * taps * lanes;
  pack_channels_last(packed, weight, C);
  std::fill_n(packed_dweight, std::size_t(C) * taps * lanes, 0.0f);
  const int Ho = H - 4, Wo = W - 4;
  f16 bias_total = {};
  const bool by_rows = dinp && W <= lanes && H <= max_rows_by_rows;
  DoutTile tile;  // 36 KB on the stack: no allocation in the training loop
  if (by_rows) clear_dout_tile(tile, Ho);
  for (int b = 0; b < B; ++b) {
    const float* dout_b = dout + std::size_t(b) * Ho * Wo * lanes;
    const float* inp_b = inp + std::size_t(b) * C * H * W;
    for (int p = 0; p < Ho * Wo; ++p) bias_total += simd::load(dout_b + std::size_t(p) * lanes);
    // dweight: per input channel, 25 tap accumulators over every output pixel.
    for (int c = 0; c < C; ++c) {
      f16 acc[taps] = {};
      for (int y = 0; y < Ho; ++y) {
        for (int x = 0; x < Wo; ++x) {
          const f16 d = simd::load(dout_b + (std::size_t(y) * Wo + x) * lanes);
          const float* base = inp_b + (std::size_t(c) * H + y) * W + x;
          for (int ky = 0; ky < 5; ++ky) {
            for (int kx = 0; kx < 5; ++kx) acc[ky * 5 + kx] += d * base[ky * W + kx];
          }
        }
      }
      float* total = packed_dweight + std::size_t(c) * taps * lanes;
      for (int t = 0; t < taps; ++t) simd::store(total + t * lanes, simd::load(total + t * lanes) + acc[t]);
    }
    if (by_rows) {
      sixteen_input_gradient_by_rows(dinp + std::size_t(b) * C * H * W, dout_b, weight, C, H, W,
                                     tile);
    } else if (dinp) {
      float* dinp_b = dinp + std::size_t(b) * C * H * W;
      int c = 0;
      for (; c + 6 <= C; c += 6) sixteen_input_gradient<6>(dinp_b, dout_b, packed, c, H, W);
      for (; c + 3 <= C; c += 3) sixteen_input_gradient<3>(dinp_b, dout_b, packed, c, H, W);
      for (; c + 2 <= C; c += 2) sixteen_input_gradient<2>(dinp_b, dout_b, packed, c, H, W);
      for (; c < C; ++c) sixteen_input_gradient<1>(dinp_b, dout_b, packed, c, H, W);
    }
  }
  for (int k = 0; k < lanes; ++k) {
    dbias[k] += bias_total[k];
    for (int c = 0; c < C; ++c) {
      for (int t = 0; t < taps; ++t) dweight[(k * C + c) * taps + t] += packed_dweight[(c * taps + t) * lanes + k];
    }
  }
}

}  // namespace cnnbench
