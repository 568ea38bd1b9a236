// What every kernel file shares on each Highway target: the float tag, its lane count as a
// compile-time constant (register blocks are sized from it), the register count, and loads and
// stores of a row's first n floats that touch no memory past them.
// Included once per target from inside a file compiled through hwy/foreach_target.h.
#if defined(CNNBENCH_LAYERS_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CNNBENCH_LAYERS_SIMD_INL_H_
#undef CNNBENCH_LAYERS_SIMD_INL_H_
#else
#define CNNBENCH_LAYERS_SIMD_INL_H_
#endif

#include <hwy/highway.h>

#include <cstddef>
#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace cnnbench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using FloatTag = hn::ScalableTag<float>;
using FloatVec = hn::Vec<FloatTag>;
// Floats per vector: 16 (AVX-512), 8 (AVX2), 4 (SSE4, NEON, portable). SVE and RVV, whose width
// is known only at run time, are not compiled (lib/CMakeLists.txt).
constexpr int lanes = static_cast<int>(HWY_LANES(float));
// Architectural vector registers: a block of accumulators plus its operands must fit.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_ARCH_ARM
constexpr int vector_registers = 32;
#else
constexpr int vector_registers = 16;
#endif
// AVX2 and AVX-512 have masked loads and stores that do not fault on the lanes left out.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr bool native_masked_memory = true;
#else
constexpr bool native_masked_memory = false;
#endif

// The first n (0..lanes) floats at p, the other lanes zero; nothing past p + n is read.
HWY_INLINE FloatVec load_first(const float* HWY_RESTRICT p, int n) {
  const FloatTag d;
  if (n == lanes) return hn::LoadU(d, p);
  if constexpr (native_masked_memory) {
    return hn::MaskedLoad(hn::FirstN(d, static_cast<std::size_t>(n)), d, p);
  } else {
    alignas(64) float part[lanes] = {};
    std::memcpy(part, p, sizeof(float) * static_cast<std::size_t>(n));
    return hn::Load(d, part);
  }
}

// The first n (0..lanes) lanes of v stored at p; nothing past p + n is written or read.
HWY_INLINE void store_first(float* HWY_RESTRICT p, FloatVec v, int n) {
  const FloatTag d;
  if (n == lanes) return hn::StoreU(v, d, p);
  if constexpr (native_masked_memory) {
    hn::BlendedStore(v, hn::FirstN(d, static_cast<std::size_t>(n)), d, p);
  } else {
    alignas(64) float part[lanes];
    hn::Store(v, d, part);
    std::memcpy(p, part, sizeof(float) * static_cast<std::size_t>(n));
  }
}

}  // namespace cnnbench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // CNNBENCH_LAYERS_SIMD_INL_H_
