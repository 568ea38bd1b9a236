// What the direct 5x5 convolutions, c1 (conv5x5_pad2.cpp) and c2 (conv5x5_to16.cpp and its
// backward pass), share on each Highway target: the register budget that sizes their blocks and
// the small vector helpers both use. Included once per target from inside those files and their
// own -inl.h headers only (its helpers have internal linkage).
#ifndef CNNBENCH_LAYERS_CONV5X5_ONCE
#define CNNBENCH_LAYERS_CONV5X5_ONCE
namespace cnnbench::conv5x5 {

constexpr int taps = 25;      // 5x5
constexpr int channels = 16;  // c2's output channels

}  // namespace cnnbench::conv5x5
#endif  // CNNBENCH_LAYERS_CONV5X5_ONCE

#if defined(CNNBENCH_LAYERS_CONV5X5_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CNNBENCH_LAYERS_CONV5X5_INL_H_
#undef CNNBENCH_LAYERS_CONV5X5_INL_H_
#else
#define CNNBENCH_LAYERS_CONV5X5_INL_H_
#endif

#include <hwy/highway.h>

#include "layers/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace cnnbench::HWY_NAMESPACE {
namespace {

using conv5x5::taps;

// --- register budget ---------------------------------------------------------------------------
// A block's accumulators stay in registers with its operands (broadcast weights or pixels, loaded
// vectors, and without FMA the product of a multiply-add) beside them: nothing spills. The block
// kernels are HWY_NOINLINE so that each is register-allocated on its own.
constexpr int max_accumulators = vector_registers >= 32 ? 24 : 12;
constexpr int product_registers = HWY_NATIVE_FMA ? 0 : 1;
constexpr bool fits(int accumulators, int operands) {
  return accumulators <= max_accumulators &&
         accumulators + operands + product_registers <= vector_registers;
}

// p, hidden from the optimiser. Where a loop broadcasts p[i] and the next one p[i + 1], GCC's
// predictive commoning keeps the broadcasts of neighbouring iterations alive and folds the vector
// loads into the multiply-adds instead: accumulators spill and the loop turns load-bound.
template <class T>
HWY_INLINE T* opaque(T* p) {
  asm("" : "+r"(p));
  return p;
}

// v, made to look computed here: the compiler then keeps it in a register for all its uses
// instead of folding its load into each multiply-add (twice the loads, split across cache lines).
HWY_INLINE void keep_in_register([[maybe_unused]] FloatVec& v) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  asm("" : "+v"(v.raw));
#elif HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4
  asm("" : "+x"(v.raw));
#endif
}

HWY_INLINE FloatVec relu(FloatVec v) { return hn::Max(v, hn::Zero(FloatTag())); }
// Tap kx of N kernels whose taps lie `taps` floats apart (w[j * taps + kx]), each in every lane.
template <int N>
HWY_INLINE void broadcast_tap(FloatVec (&wv)[N], const float* w, int kx) {
#pragma GCC unroll 8
  for (int j = 0; j < N; ++j) wv[j] = hn::Set(FloatTag(), w[j * taps + kx]);
}
HWY_INLINE float sum_of_lanes(FloatVec v) { return hn::GetLane(hn::SumOfLanes(FloatTag(), v)); }

}  // namespace
}  // namespace cnnbench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // CNNBENCH_LAYERS_CONV5X5_INL_H_
