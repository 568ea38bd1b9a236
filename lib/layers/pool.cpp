// 2x2 stride-2 pooling over planes (max and average), and LeNet-5's fused forms (channels last,
// ReLU backward folded in). An odd last row or column is ignored, as PyTorch's floor mode does;
// backward writes zeros there. Compiled once per SIMD target: max-pool on explicit vectors (along
// the rows of a plane, or the 16 channels of a pixel), average pooling as plain loops the compiler
// vectorises for the target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "layers/pool.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "layers/simd-inl.h"

#ifndef CNNBENCH_LAYERS_POOL_ONCE
#define CNNBENCH_LAYERS_POOL_ONCE
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "cnnbench/core.hpp"
#include "cnnbench/layers.hpp"
#endif

HWY_BEFORE_NAMESPACE();
namespace cnnbench::HWY_NAMESPACE {

// inp (planes,H,W) -> out (planes,H/2,W/2): out[ox] = window(top, bottom, ox) over the rows
// top and bottom of each 2x2 window. Inlined into each pool, so each loop vectorises on its own.
template <class Window>
HWY_INLINE void pool_forward(float* out, const float* inp, int planes, int H, int W,
                             Window window) {
  const int Ho = H / 2, Wo = W / 2;
  for (int p = 0; p < planes; ++p) {
    for (int oy = 0; oy < Ho; ++oy) {
      const float* __restrict__ top = inp + (std::size_t(p) * H + 2 * oy) * W;
      const float* __restrict__ bottom = top + W;
      float* __restrict__ dst = out + (std::size_t(p) * Ho + oy) * Wo;
      for (int ox = 0; ox < Wo; ++ox) dst[ox] = window(top, bottom, ox);
    }
  }
}

namespace {

#if HWY_TARGET == HWY_SCALAR
// One pair of input rows, We (even) wide: recomputes each window's first maximum in row-major
// order (a b / c d: a wins ties with everything, b with c and d, c with d) and writes all four
// gradients, one window per iteration (HWY_SCALAR's vectors hold one float). Bitwise & instead
// of && keeps the loop free of branches, which random data would mispredict.
void maxpool_backward_rows_by_window(float* __restrict__ dtop, float* __restrict__ dbottom,
                                     const float* __restrict__ g, const float* __restrict__ top,
                                     const float* __restrict__ bottom, int We) {
  for (int ox = 0; ox < We / 2; ++ox) {
    const float a = top[2 * ox], b = top[2 * ox + 1], c = bottom[2 * ox], d = bottom[2 * ox + 1];
    const float upper = a >= b ? a : b, lower = c >= d ? c : d;
    const float max = upper >= lower ? upper : lower;
    const bool a_wins = a == max;
    const bool b_wins = (b == max) & !a_wins;
    const bool c_wins = (c == max) & !a_wins & !b_wins;
    const bool d_wins = !a_wins & !b_wins & !c_wins;
    dtop[2 * ox] = a_wins ? g[ox] : 0.0f;
    dtop[2 * ox + 1] = b_wins ? g[ox] : 0.0f;
    dbottom[2 * ox] = c_wins ? g[ox] : 0.0f;
    dbottom[2 * ox + 1] = d_wins ? g[ox] : 0.0f;
  }
}
#else
// Calls at(x, n) for the stretches of an input row We (even) wide that one call handles: n = Step
// inputs at x = 0, Step, ..., the last stretch moved left to We - Step (even: windows stay whole;
// inputs already done are done again with the same values), or one stretch of n = We < Step.
template <int Step, class At>
HWY_INLINE void for_each_row_stretch(int We, At at) {
  if (We < Step) return at(0, We);
  for (int x = 0;; x += Step) {
    const int from = std::min(x, We - Step);
    at(from, Step);
    if (from + Step == We) return;
  }
}

// Max-pool forward of one pair of input rows, We (even) wide, 2 vectors of inputs per output
// vector: ConcatEven and ConcatOdd split each row into its windows' first and second columns,
// compared in the order of the per-window loop (a >= b ? a : b, ...), so that even 0 and -0 come
// out as there. (The compiler's own vectorisation of that loop ran pool1 at half this speed on
// AVX-512.) Called only where native_masked_memory holds: on SSE4 it is compiled, not used and
// not emitted.
[[maybe_unused]] void maxpool_forward_rows(float* out, const float* top, const float* bottom,
                                           int We) {
  const FloatTag d;
  for_each_row_stretch<2 * lanes>(We, [&](int x, int n) {
    const int first = std::min(n, lanes), second = n - first;
    const FloatVec top0 = load_first(top + x, first), top1 = load_first(top + x + lanes, second);
    const FloatVec bottom0 = load_first(bottom + x, first),
                   bottom1 = load_first(bottom + x + lanes, second);
    const FloatVec a = hn::ConcatEven(d, top1, top0), b = hn::ConcatOdd(d, top1, top0);
    const FloatVec c = hn::ConcatEven(d, bottom1, bottom0), e = hn::ConcatOdd(d, bottom1, bottom0);
    const FloatVec upper = hn::IfThenElse(a >= b, a, b), lower = hn::IfThenElse(c >= e, c, e);
    store_first(out + x / 2, hn::IfThenElse(upper >= lower, upper, lower), n / 2);
  });
}

// One pair of input rows, We (even) wide: recomputes each window's first maximum in row-major
// order (a b / c d: a wins ties with everything, b with c and d, c with d) and writes all four
// gradients. With Relu, inp is a ReLU output and ReLU's backward rides along: the winner keeps
// its gradient only where it is positive, as a second pass zeroing dinp where inp <= 0 would.
// Whole vectors of the rows, every lane one input: Reverse2 brings each input's neighbour in its
// window row alongside, so every lane finds its window's maximum and whether it is the first one,
// and the window's gradient comes duplicated into its two lanes. (The compiler's own
// vectorisation of a loop over windows, with its stride-2 loads and stores, ran pool1's backward
// at 1.2 ns per input on AVX-512, 7-10x this.) NaN-free inputs route as the scalar loop does: Max
// and >= differ only in which of two equal values (0 and -0) they return, and == cannot tell
// those apart.
template <bool Relu>
class MaxpoolBackwardVectors {
 public:
  MaxpoolBackwardVectors() {
    alignas(64) std::int32_t pairs[lanes];
    for (int i = 0; i < lanes; ++i) pairs[i] = i / 2;
    duplicate_ = hn::SetTableIndices(d_, pairs);
  }

  void rows(float* dtop, float* dbottom, const float* g, const float* top, const float* bottom,
            int We) const {
    for_each_row_stretch<lanes>(We,
                                [&](int x, int n) { vector(dtop, dbottom, g, top, bottom, x, n); });
  }

 private:
  // The n (even) inputs from x of both rows.
  HWY_INLINE void vector(float* dtop, float* dbottom, const float* g, const float* top,
                         const float* bottom, int x, int n) const {
    const FloatVec t = load_first(top + x, n), b = load_first(bottom + x, n);
    const FloatVec t_partner = hn::Reverse2(d_, t), b_partner = hn::Reverse2(d_, b);
    const FloatVec max = hn::Max(hn::Max(t, t_partner), hn::Max(b, b_partner));
    const auto t_max = t == max, t_partner_max = t_partner == max;
    const auto b_max = b == max, b_partner_max = b_partner == max;
    const auto odd = hn::Eq(hn::OddEven(hn::Set(d_, 1.0f), hn::Zero(d_)), hn::Set(d_, 1.0f));
    // a where it is the maximum, b where it is and a is not.
    auto top_wins = hn::AndNot(hn::And(odd, t_partner_max), t_max);
    // c where it is the maximum and neither a nor b is; d where none of a, b, c is.
    auto bottom_wins = hn::AndNot(hn::Or(t_max, t_partner_max),
                                  hn::Or(hn::AndNot(odd, b_max), hn::AndNot(b_partner_max, odd)));
    if constexpr (Relu) {
      top_wins = hn::And(top_wins, t > hn::Zero(d_));
      bottom_wins = hn::And(bottom_wins, b > hn::Zero(d_));
    }
    const FloatVec window_g = n == lanes ? hn::ZeroExtendVector(d_, hn::LoadU(half_, g + x / 2))
                                         : load_first(g + x / 2, n / 2);
    const FloatVec lane_g = hn::TableLookupLanes(window_g, duplicate_);
    store_first(dtop + x, hn::IfThenElseZero(top_wins, lane_g), n);
    store_first(dbottom + x, hn::IfThenElseZero(bottom_wins, lane_g), n);
  }

  FloatTag d_;
  hn::Half<FloatTag> half_;
  decltype(hn::SetTableIndices(FloatTag(), static_cast<const std::int32_t*>(nullptr))) duplicate_;
};
#endif

// Full windows route their gradient to one input; an odd last row/column gets zeros.
template <bool Relu>
HWY_INLINE void maxpool_backward_planes(float* dinp, const float* dout, const float* inp,
                                        int planes, int H, int W) {
  const int Ho = H / 2, Wo = W / 2;
#if HWY_TARGET != HWY_SCALAR
  const MaxpoolBackwardVectors<Relu> vectors;
#else
  static_assert(!Relu, "HWY_SCALAR applies ReLU's backward in a pass of its own");
#endif
  for (int p = 0; p < planes; ++p) {
    const float* plane = inp + std::size_t(p) * H * W;
    float* dplane = dinp + std::size_t(p) * H * W;
    for (int oy = 0; oy < Ho; ++oy) {
      float* dtop = dplane + 2 * oy * W;
      const float* g = dout + (std::size_t(p) * Ho + oy) * Wo;
      const float* top = plane + 2 * oy * W;
#if HWY_TARGET != HWY_SCALAR
      vectors.rows(dtop, dtop + W, g, top, top + W, 2 * Wo);
#else
      maxpool_backward_rows_by_window(dtop, dtop + W, g, top, top + W, 2 * Wo);
#endif
      if (W % 2 != 0) dtop[W - 1] = dtop[2 * W - 1] = 0.0f;
    }
    if (H % 2 != 0) std::memset(dplane + std::size_t(H - 1) * W, 0, sizeof(float) * W);
  }
}

// The 16 channels of one pixel as 16 / lanes vectors.
constexpr int channel_vectors = 16 / lanes;
static_assert(channel_vectors * lanes == 16, "16 channels must be whole vectors");

}  // namespace

// On explicit vectors where loads and stores of part of a vector are native (AVX2, AVX-512);
// elsewhere the per-window loop: on SSE4 the vectors were no faster (pool1 at batch 64 took 24 to
// 34 us either way, with the same instructions, as the code's placement moved).
void maxpool_forward(float* out, const float* inp, int planes, int H, int W) {
#if HWY_TARGET != HWY_SCALAR
  if constexpr (native_masked_memory) {
    const int Ho = H / 2, Wo = W / 2;
    for (int p = 0; p < planes; ++p) {
      for (int oy = 0; oy < Ho; ++oy) {
        const float* top = inp + (std::size_t(p) * H + 2 * oy) * W;
        maxpool_forward_rows(out + (std::size_t(p) * Ho + oy) * Wo, top, top + W, 2 * Wo);
      }
    }
    return;
  }
#endif
  pool_forward(out, inp, planes, H, W,
               [](const float* __restrict__ top, const float* __restrict__ bottom, int ox) {
                 const float upper = top[2 * ox] >= top[2 * ox + 1] ? top[2 * ox] : top[2 * ox + 1];
                 const float lower =
                     bottom[2 * ox] >= bottom[2 * ox + 1] ? bottom[2 * ox] : bottom[2 * ox + 1];
                 return upper >= lower ? upper : lower;
               });
}

void maxpool_backward(float* dinp, const float* dout, const float* inp, int planes, int H, int W) {
  maxpool_backward_planes<false>(dinp, dout, inp, planes, H, W);
}

// The same routing where inp is a ReLU output, ReLU's backward folded in: one pass over dinp
// where vectors allow (on HWY_SCALAR a second plain pass, which the compiler vectorises, ran
// faster than the per-window tests folded into the first).
void maxpool_relu_backward(float* dinp, const float* dout, const float* inp, int planes, int H,
                           int W) {
#if HWY_TARGET != HWY_SCALAR
  maxpool_backward_planes<true>(dinp, dout, inp, planes, H, W);
#else
  maxpool_backward_planes<false>(dinp, dout, inp, planes, H, W);
  const std::size_t n = std::size_t(planes) * H * W;
  float* __restrict__ d = dinp;
  const float* __restrict__ x = inp;
  for (std::size_t i = 0; i < n; ++i) d[i] = x[i] > 0.0f ? d[i] : 0.0f;
#endif
}

// inp (B,H,W,16) channels last -> out (B,16,H/2,W/2) channels first, i.e. flatten order.
void maxpool_channels_last16_forward(float* out, const float* inp, int B, int H, int W) {
  const FloatTag d;
  const int Ho = H / 2, Wo = W / 2;
  for (int b = 0; b < B; ++b) {
    const float* inp_b = inp + std::size_t(b) * H * W * 16;
    float* out_b = out + std::size_t(b) * 16 * Ho * Wo;
    for (int oy = 0; oy < Ho; ++oy) {
      for (int ox = 0; ox < Wo; ++ox) {
        const float* a = inp_b + (std::size_t(2 * oy) * W + 2 * ox) * 16;
        const float* c = a + std::size_t(W) * 16;
        alignas(64) float max[16];
        for (int v = 0; v < channel_vectors; ++v) {
          const FloatVec va = hn::LoadU(d, a + v * lanes), vb = hn::LoadU(d, a + 16 + v * lanes);
          const FloatVec vc = hn::LoadU(d, c + v * lanes), vd = hn::LoadU(d, c + 16 + v * lanes);
          const FloatVec upper = hn::IfThenElse(va >= vb, va, vb);
          const FloatVec lower = hn::IfThenElse(vc >= vd, vc, vd);
          hn::Store(hn::IfThenElse(upper >= lower, upper, lower), d, max + v * lanes);
        }
        for (int k = 0; k < 16; ++k) out_b[(k * Ho + oy) * Wo + ox] = max[k];
      }
    }
  }
}

// dout (B,16,H/2,W/2) -> dinp (B,H,W,16), where inp (B,H,W,16) is a ReLU output: max-pool's
// first-maximum routing and ReLU's backward in one pass, 16 channels at a time.
void maxpool_relu_channels_last16_backward(float* dinp, const float* dout, const float* inp, int B,
                                           int H, int W) {
  const FloatTag d;
  const FloatVec zero = hn::Zero(d);
  const int Ho = H / 2, Wo = W / 2;
  for (int b = 0; b < B; ++b) {
    const float* inp_b = inp + std::size_t(b) * H * W * 16;
    const float* dout_b = dout + std::size_t(b) * 16 * Ho * Wo;
    float* dinp_b = dinp + std::size_t(b) * H * W * 16;
    for (int oy = 0; oy < Ho; ++oy) {
      for (int ox = 0; ox < Wo; ++ox) {
        alignas(64) float gathered[16];
        for (int k = 0; k < 16; ++k) gathered[k] = dout_b[(k * Ho + oy) * Wo + ox];
        const std::size_t top = (std::size_t(2 * oy) * W + 2 * ox) * 16;
        const std::size_t bottom = top + std::size_t(W) * 16;
        for (int v = 0; v < channel_vectors; ++v) {
          const std::size_t at = std::size_t(v) * lanes;
          const FloatVec va = hn::LoadU(d, inp_b + top + at);
          const FloatVec vb = hn::LoadU(d, inp_b + top + 16 + at);
          const FloatVec vc = hn::LoadU(d, inp_b + bottom + at);
          const FloatVec vd = hn::LoadU(d, inp_b + bottom + 16 + at);
          const FloatVec upper = hn::IfThenElse(va >= vb, va, vb);
          const FloatVec lower = hn::IfThenElse(vc >= vd, vc, vd);
          const FloatVec max = hn::IfThenElse(upper >= lower, upper, lower);
          // ReLU: no positive input, no gradient.
          const FloatVec g = hn::IfThenElseZero(max > zero, hn::Load(d, gathered + at));
          const auto a_wins = va == max;
          const auto b_wins = hn::AndNot(a_wins, vb == max);
          const auto c_wins = hn::AndNot(hn::Or(a_wins, b_wins), vc == max);
          const auto d_wins = hn::Not(hn::Or(hn::Or(a_wins, b_wins), c_wins));
          hn::StoreU(hn::IfThenElseZero(a_wins, g), d, dinp_b + top + at);
          hn::StoreU(hn::IfThenElseZero(b_wins, g), d, dinp_b + top + 16 + at);
          hn::StoreU(hn::IfThenElseZero(c_wins, g), d, dinp_b + bottom + at);
          hn::StoreU(hn::IfThenElseZero(d_wins, g), d, dinp_b + bottom + 16 + at);
        }
      }
    }
  }
}

// The mean of each window.
void avgpool_forward(float* out, const float* inp, int planes, int H, int W) {
  pool_forward(out, inp, planes, H, W,
               [](const float* __restrict__ top, const float* __restrict__ bottom, int ox) {
                 return 0.25f *
                        ((top[2 * ox] + top[2 * ox + 1]) + (bottom[2 * ox] + bottom[2 * ox + 1]));
               });
}

// Each window's gradient is shared equally by its four inputs.
void avgpool_backward(float* dinp, const float* dout, int planes, int H, int W) {
  const int Ho = H / 2, Wo = W / 2;
  for (int p = 0; p < planes; ++p) {
    float* dplane = dinp + std::size_t(p) * H * W;
    for (int oy = 0; oy < Ho; ++oy) {
      float* __restrict__ dtop = dplane + 2 * oy * W;
      float* __restrict__ dbottom = dtop + W;
      const float* __restrict__ g = dout + (std::size_t(p) * Ho + oy) * Wo;
      for (int ox = 0; ox < Wo; ++ox) {
        const float share = 0.25f * g[ox];
        dtop[2 * ox] = dtop[2 * ox + 1] = dbottom[2 * ox] = dbottom[2 * ox + 1] = share;
      }
      if (W % 2 != 0) dtop[W - 1] = dbottom[W - 1] = 0.0f;
    }
    if (H % 2 != 0) std::memset(dplane + std::size_t(H - 1) * W, 0, sizeof(float) * W);
  }
}

}  // namespace cnnbench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "layers/kernel_dispatch.h"

namespace cnnbench {

namespace {

HWY_EXPORT(maxpool_forward);
HWY_EXPORT(maxpool_backward);
HWY_EXPORT(maxpool_relu_backward);
HWY_EXPORT(maxpool_channels_last16_forward);
HWY_EXPORT(maxpool_relu_channels_last16_backward);
HWY_EXPORT(avgpool_forward);
HWY_EXPORT(avgpool_backward);

void check_channels_last_shape(int H, int W) {
  CNNBENCH_CHECK(H >= 2 && W >= 2 && H % 2 == 0 && W % 2 == 0,
                 "maxpool2x2 channels-last: needs even sizes (got " + std::to_string(H) + "x" +
                     std::to_string(W) + ")");
}

}  // namespace

void maxpool2x2_forward(float* out, const float* inp, int planes, int H, int W) {
  CNNBENCH_DISPATCH(pool, maxpool_forward)(out, inp, planes, H, W);
}

void maxpool2x2_backward(float* dinp, const float* dout, const float* inp, int planes, int H,
                         int W) {
  CNNBENCH_DISPATCH(pool, maxpool_backward)(dinp, dout, inp, planes, H, W);
}

void maxpool2x2_relu_backward(float* dinp, const float* dout, const float* inp, int planes, int H,
                              int W) {
  CNNBENCH_DISPATCH(pool, maxpool_relu_backward)(dinp, dout, inp, planes, H, W);
}

void maxpool2x2_channels_last16_forward(float* out, const float* inp, int B, int H, int W) {
  check_channels_last_shape(H, W);
  CNNBENCH_DISPATCH(pool, maxpool_channels_last16_forward)(out, inp, B, H, W);
}

void maxpool2x2_relu_channels_last16_backward(float* dinp, const float* dout, const float* inp,
                                              int B, int H, int W) {
  check_channels_last_shape(H, W);
  CNNBENCH_DISPATCH(pool, maxpool_relu_channels_last16_backward)(dinp, dout, inp, B, H, W);
}

void avgpool2x2_forward(float* out, const float* inp, int planes, int H, int W) {
  CNNBENCH_DISPATCH(pool, avgpool_forward)(out, inp, planes, H, W);
}

void avgpool2x2_backward(float* dinp, const float* dout, int planes, int H, int W) {
  CNNBENCH_DISPATCH(pool, avgpool_backward)(dinp, dout, planes, H, W);
}

}  // namespace cnnbench
#endif  // HWY_ONCE
