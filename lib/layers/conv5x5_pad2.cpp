// Direct 5x5 convolution of LeNet-5's c1 (one input channel, pad 2, ReLU in the forward pass),
// without im2col, compiled once per SIMD target (Google Highway): vectorised along image rows,
// with blocks sized from the target's lanes and registers (conv5x5-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "layers/conv5x5_pad2.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "layers/conv5x5-inl.h"
#include "layers/simd-inl.h"

#ifndef CNNBENCH_LAYERS_CONV5X5_PAD2_ONCE
#define CNNBENCH_LAYERS_CONV5X5_PAD2_ONCE
#include <algorithm>
#include <cstring>
#include <string>

#include "cnnbench/core.hpp"
#include "cnnbench/layers.hpp"

namespace cnnbench::conv5x5 {

// One plane zero-padded by 2 into a 32x32 tile. Rows are at most 28 wide, so every row vector
// of every tap (x + kx + lanes <= W + 4 <= 32) reads inside the tile.
constexpr int max_single_channel_width = 28;
struct PaddedPlane {
  alignas(64) float at[32][32];
};

inline void pad_plane(PaddedPlane& tile, const float* plane, int H, int W) {
  std::memset(&tile, 0, sizeof tile);
  for (int y = 0; y < H; ++y) std::memcpy(&tile.at[y + 2][2], plane + y * W, sizeof(float) * W);
}

// One plane flat (rows back to back) between zero margins, for the weight gradient on AVX-512:
// tap (ky, kx) of pixel q reads q + (ky - 2) W + kx - 2, which is at most 2 W + 2 before the
// plane and, from the last vector's lanes, 2 W + 2 + 15 past it.
constexpr int max_single_channel_pixels = 28 * 28;
constexpr int flat_margin = 96;
struct FlatPlane {
  alignas(64) float at[flat_margin + max_single_channel_pixels + flat_margin];
  float* first() { return at + flat_margin; }
};

inline void clear_flat_margins(FlatPlane& flat, int pixels) {
  std::fill_n(flat.at, flat_margin, 0.0f);
  std::fill_n(flat.first() + pixels, flat_margin, 0.0f);
}

inline void check_single_channel_shape(int K, int H, int W) {
  CNNBENCH_CHECK(K > 0 && H >= 1 && H <= 28 && W >= 16 && W <= max_single_channel_width,
                 "conv5x5_pad2: needs 16 <= width <= 28 and height <= 28 (got " +
                     std::to_string(H) + "x" + std::to_string(W) + ", " + std::to_string(K) +
                     " kernels)");
}

}  // namespace cnnbench::conv5x5
#endif  // CNNBENCH_LAYERS_CONV5X5_PAD2_ONCE

HWY_BEFORE_NAMESPACE();
namespace cnnbench::HWY_NAMESPACE {
namespace {

using conv5x5::PaddedPlane;
using conv5x5::taps;

// --- c1: one input channel, pad 2, rows of 16..28 pixels --------------------------------------

// Vectors per row: enough for the widest row (2, 4 or 7). Vector v starts at x = v * lanes, the
// last ones moved left to W - lanes (overlapping: computed twice, stored twice, equal values).
constexpr int c1_row_vectors = (conv5x5::max_single_channel_width + lanes - 1) / lanes;
HWY_INLINE int c1_vector_x(int v, int W) { return std::min(v * lanes, W - lanes); }

// Kernels per forward block: row_vectors x KC accumulators, KC weights and one input vector.
// AVX-512 2 x 6, AVX2 4 x 3, SSE4 7 x 1, NEON 7 x 3.
constexpr int c1_forward_block() {
  for (int kc : {6, 3, 2}) {
    if (fits(c1_row_vectors * kc, kc + 1)) return kc;
  }
  return 1;
}

// KC output channels [k0, k0+KC) of one sample, every row as c1_row_vectors vectors per kernel.
template <int KC>
HWY_NOINLINE void c1_rows(float* out, const PaddedPlane& tile, const float* weight,
                          const float* bias, int k0, int H, int W) {
  constexpr int V = c1_row_vectors;
  const FloatTag d;
  int x[V];
  for (int v = 0; v < V; ++v) x[v] = c1_vector_x(v, W);
  for (int y = 0; y < H; ++y) {
    FloatVec acc[KC][V];
#pragma GCC unroll 8
    for (int j = 0; j < KC; ++j) {
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) acc[j][v] = hn::Set(d, bias[k0 + j]);
    }
    for (int ky = 0; ky < 5; ++ky) {
      const float* row = tile.at[y + ky];
      const float* w = weight + k0 * taps + ky * 5;
#pragma GCC unroll 5
      for (int kx = 0; kx < 5; ++kx) {
        const float* row_at_tap = row + kx;
        FloatVec wv[KC];
        broadcast_tap(wv, w, kx);
#pragma GCC unroll 8
        for (int v = 0; v < V; ++v) {
          const FloatVec pixels = hn::LoadU(d, row_at_tap + x[v]);
#pragma GCC unroll 8
          for (int j = 0; j < KC; ++j) acc[j][v] = hn::MulAdd(wv[j], pixels, acc[j][v]);
        }
      }
    }
#pragma GCC unroll 8
    for (int j = 0; j < KC; ++j) {
      float* dst = out + (std::size_t(k0 + j) * H + y) * W;
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) hn::StoreU(relu(acc[j][v]), d, dst + x[v]);
    }
  }
}

void c1_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int K,
                int H, int W) {
  constexpr int KC = c1_forward_block();
  PaddedPlane tile;
  for (int b = 0; b < B; ++b) {
    conv5x5::pad_plane(tile, inp + std::size_t(b) * H * W, H, W);
    float* out_b = out + std::size_t(b) * K * H * W;
    int k = 0;
    for (; k + KC <= K; k += KC) c1_rows<KC>(out_b, tile, weight, bias, k, H, W);
    for (; k < K; ++k) c1_rows<1>(out_b, tile, weight, bias, k, H, W);
  }
}

// Weight gradients: per ky, KC x 5 tap accumulators (plus KC dout vectors and one input vector),
// kept as per-lane partial sums and reduced across lanes once at the end. AVX-512 and NEON 3,
// the 16-register targets 2.
constexpr int c1_gradient_block = vector_registers >= 32 ? 3 : 2;

// One row vector at x of KC dout rows times the 5 input vectors of kernel row ky.
template <int KC, bool WithBias>
HWY_INLINE void c1_gradient_vector(FloatVec (&acc)[KC][5], FloatVec (&bias_acc)[KC],
                                   const FloatVec (&dout)[KC], const float* row) {
  const FloatTag d;
  if constexpr (WithBias) {
#pragma GCC unroll 8
    for (int j = 0; j < KC; ++j) bias_acc[j] = hn::Add(bias_acc[j], dout[j]);
  }
#pragma GCC unroll 5
  for (int kx = 0; kx < 5; ++kx) {
    FloatVec pixels = hn::LoadU(d, row + kx);
    keep_in_register(pixels);
#pragma GCC unroll 8
    for (int j = 0; j < KC; ++j) acc[j][kx] = hn::MulAdd(dout[j], pixels, acc[j][kx]);
  }
}

// A kernel row's accumulated taps (and the bias, once per sample) into the pass's totals.
template <int KC, bool WithBias>
HWY_INLINE void add_row_of_taps(FloatVec (&total)[KC][taps], FloatVec (&bias_total)[KC],
                                const FloatVec (&acc)[KC][5], const FloatVec (&bias_acc)[KC], int ky) {
#pragma GCC unroll 8
  for (int j = 0; j < KC; ++j) {
    if constexpr (WithBias) bias_total[j] = hn::Add(bias_total[j], bias_acc[j]);
#pragma GCC unroll 5
    for (int kx = 0; kx < 5; ++kx) {
      total[j][ky * 5 + kx] = hn::Add(total[j][ky * 5 + kx], acc[j][kx]);
    }
  }
}

// The per-row accumulators of a c1 weight-gradient pass: 5 taps and the bias per channel.
template <int KC>
HWY_INLINE void zero_accumulators(FloatVec (&acc)[KC][5], FloatVec (&bias_acc)[KC]) {
  const FloatTag d;
#pragma GCC unroll 8
  for (int j = 0; j < KC; ++j) {
    bias_acc[j] = hn::Zero(d);
#pragma GCC unroll 5
    for (int kx = 0; kx < 5; ++kx) acc[j][kx] = hn::Zero(d);
  }
}

// Kernel row ky of KC output channels over one sample, added to total; the dbias partial sums
// ride along once per sample (WithBias, at ky = 0). Rows are full vectors at x = 0, lanes, ...
// and, where W is no multiple of lanes, one at W - lanes whose lanes already covered are masked.
template <int KC, bool WithBias>
HWY_NOINLINE void c1_gradient_row_of_taps(FloatVec (&total)[KC][taps], FloatVec (&bias_total)[KC],
                                          const float* dout_b, const PaddedPlane& tile, int k0,
                                          int ky, int H, int W) {
  const FloatTag d;
  const int full = W / lanes, tail = W % lanes;
  const auto tail_mask = hn::Iota(d, 0.0f) >= hn::Set(d, float(lanes - tail));
  FloatVec acc[KC][5], bias_acc[KC];
  zero_accumulators(acc, bias_acc);
  for (int y = 0; y < H; ++y) {
    const float* row = tile.at[y + ky];
    const float* dout_row = dout_b + (std::size_t(k0) * H + y) * W;
    for (int v = 0; v < full; ++v) {
      FloatVec dv[KC];
#pragma GCC unroll 8
      for (int j = 0; j < KC; ++j) {
        dv[j] = hn::LoadU(d, dout_row + std::size_t(j) * H * W + v * lanes);
      }
      c1_gradient_vector<KC, WithBias>(acc, bias_acc, dv, row + v * lanes);
    }
    if (tail != 0) {
      FloatVec dv[KC];
#pragma GCC unroll 8
      for (int j = 0; j < KC; ++j) {
        dv[j] = hn::IfThenElseZero(tail_mask,
                                   hn::LoadU(d, dout_row + std::size_t(j) * H * W + W - lanes));
      }
      c1_gradient_vector<KC, WithBias>(acc, bias_acc, dv, row + W - lanes);
    }
  }
  add_row_of_taps<KC, WithBias>(total, bias_total, acc, bias_acc, ky);
}

// On AVX-512, a sample's pixels flat, rows running into each other: vector i holds pixels
// [i lanes, (i + 1) lanes), 49 whole vectors for 28 x 28 where rows of 28 were 2 vectors with 4
// lanes idle. Tap kx of a lane whose pixel x has x + kx - 2 outside [0, W) reads the neighbouring
// row's pixel instead of the zero padding: tap_lanes[i][kx] leaves it out, in the load (zero-
// masking loads cost what plain ones do there): LeNet-5's c1 at batch 64 on avx3, 81 -> 75 us.
// Where a masked load is a load and a blend, rows stay whole vectors over a padded tile: flat,
// the weight gradient was 5-25% slower (avx2, sse4, scalar).
constexpr bool c1_gradient_flat = HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL;
constexpr int c1_max_flat_vectors =
    c1_gradient_flat ? (conv5x5::max_single_channel_pixels + lanes - 1) / lanes : 1;
using TapLanes = hn::Mask<FloatTag>[c1_max_flat_vectors][5];

void make_tap_lanes(TapLanes& tap_lanes, int H, int W) {
  const FloatTag d;
  const int vectors = (H * W + lanes - 1) / lanes;
  for (int i = 0; i < vectors; ++i) {
    alignas(64) float x[lanes];
    for (int l = 0; l < lanes; ++l) x[l] = float((i * lanes + l) % W);
    const FloatVec xv = hn::Load(d, x);
    for (int kx = 0; kx < 5; ++kx) {
      const FloatVec at = hn::Add(xv, hn::Set(d, float(kx - 2)));
      tap_lanes[i][kx] = hn::And(hn::Ge(at, hn::Zero(d)), hn::Lt(at, hn::Set(d, float(W))));
    }
  }
}

// Kernel row ky of KC output channels over one sample, its input plane flat between zero
// margins, added to total; the dbias partial sums ride along once per sample (WithBias, at
// ky = 0). The last vector, where H W is no multiple of lanes, takes dout's first lanes only.
template <int KC, bool WithBias>
HWY_NOINLINE void c1_gradient_flat_taps(FloatVec (&total)[KC][taps], FloatVec (&bias_total)[KC],
                                        const float* dout_b, const float* flat,
                                        const TapLanes& tap_lanes, int k0, int ky, int H, int W) {
  const FloatTag d;
  const int pixels = H * W, full = pixels / lanes;
  const int vectors = (pixels + lanes - 1) / lanes;
  const float* taps_at = flat + (ky - 2) * W - 2;
  FloatVec acc[KC][5], bias_acc[KC];
  zero_accumulators(acc, bias_acc);
  for (int i = 0; i < vectors; ++i) {
    const int q = i * lanes;
    FloatVec dv[KC];
#pragma GCC unroll 8
    for (int j = 0; j < KC; ++j) {
      const float* dout_at = dout_b + std::size_t(k0 + j) * pixels + q;
      dv[j] = i < full ? hn::LoadU(d, dout_at) : load_first(dout_at, pixels - q);
      if constexpr (WithBias) bias_acc[j] = hn::Add(bias_acc[j], dv[j]);
    }
#pragma GCC unroll 5
    for (int kx = 0; kx < 5; ++kx) {
      FloatVec inputs = hn::IfThenElseZero(tap_lanes[i][kx], hn::LoadU(d, taps_at + q + kx));
      keep_in_register(inputs);
#pragma GCC unroll 8
      for (int j = 0; j < KC; ++j) acc[j][kx] = hn::MulAdd(dv[j], inputs, acc[j][kx]);
    }
  }
  add_row_of_taps<KC, WithBias>(total, bias_total, acc, bias_acc, ky);
}

template <int KC>
void c1_gradient_channels(float* dweight, float* dbias, const float* dout, const float* inp,
                          const TapLanes& tap_lanes, int k0, int B, int K, int H, int W) {
  const FloatTag d;
  FloatVec total[KC][taps], bias_total[KC];
  for (int j = 0; j < KC; ++j) {
    bias_total[j] = hn::Zero(d);
    for (int t = 0; t < taps; ++t) total[j][t] = hn::Zero(d);
  }
  if constexpr (c1_gradient_flat) {
    conv5x5::FlatPlane flat;
    conv5x5::clear_flat_margins(flat, H * W);
    for (int b = 0; b < B; ++b) {
      std::memcpy(flat.first(), inp + std::size_t(b) * H * W, sizeof(float) * H * W);
      const float* dout_b = dout + std::size_t(b) * K * H * W;
      c1_gradient_flat_taps<KC, true>(total, bias_total, dout_b, flat.first(), tap_lanes, k0, 0,
                                      H, W);
      for (int ky = 1; ky < 5; ++ky) {
        c1_gradient_flat_taps<KC, false>(total, bias_total, dout_b, flat.first(), tap_lanes, k0,
                                         ky, H, W);
      }
    }
  } else {
    PaddedPlane tile;
    for (int b = 0; b < B; ++b) {
      conv5x5::pad_plane(tile, inp + std::size_t(b) * H * W, H, W);
      const float* dout_b = dout + std::size_t(b) * K * H * W;
      c1_gradient_row_of_taps<KC, true>(total, bias_total, dout_b, tile, k0, 0, H, W);
      for (int ky = 1; ky < 5; ++ky) {
        c1_gradient_row_of_taps<KC, false>(total, bias_total, dout_b, tile, k0, ky, H, W);
      }
    }
  }
  for (int j = 0; j < KC; ++j) {
    for (int t = 0; t < taps; ++t) dweight[(k0 + j) * taps + t] += sum_of_lanes(total[j][t]);
    dbias[k0 + j] += sum_of_lanes(bias_total[j]);
  }
}

void c1_backward_weights(float* dweight, float* dbias, const float* dout, const float* inp, int B,
                         int K, int H, int W) {
  constexpr int KC = c1_gradient_block;
  TapLanes tap_lanes;
  if constexpr (c1_gradient_flat) make_tap_lanes(tap_lanes, H, W);
  int k = 0;
  for (; k + KC <= K; k += KC) {
    c1_gradient_channels<KC>(dweight, dbias, dout, inp, tap_lanes, k, B, K, H, W);
  }
  for (; k < K; ++k) c1_gradient_channels<1>(dweight, dbias, dout, inp, tap_lanes, k, B, K, H, W);
}

}  // namespace
}  // namespace cnnbench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "layers/kernel_dispatch.h"

namespace cnnbench {

HWY_EXPORT(c1_forward);
HWY_EXPORT(c1_backward_weights);

void conv5x5_pad2_relu_forward(float* out, const float* inp, const float* weight,
                               const float* bias, int B, int K, int H, int W) {
  conv5x5::check_single_channel_shape(K, H, W);
  CNNBENCH_DISPATCH(conv_forward, c1_forward)(out, inp, weight, bias, B, K, H, W);
}

void conv5x5_pad2_backward_weights(float* dweight, float* dbias, const float* dout,
                                   const float* inp, int B, int K, int H, int W) {
  conv5x5::check_single_channel_shape(K, H, W);
  CNNBENCH_DISPATCH(conv_backward, c1_backward_weights)(dweight, dbias, dout, inp, B, K, H, W);
}

}  // namespace cnnbench
#endif  // HWY_ONCE
