// Sixteen floats as one value (GCC/Clang vector extensions): one AVX-512 register where the build
// targets it, two AVX2 or four SSE registers elsewhere. Loads and stores need no alignment.
#pragma once

#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace cnnbench::simd {

using f16 = float __attribute__((vector_size(64)));
using f8 = float __attribute__((vector_size(32)));
using f4 = float __attribute__((vector_size(16)));

inline f16 load(const float* p) {
  f16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, f16 v) { std::memcpy(p, &v, sizeof v); }
// The first n (1..16) floats at p, the other lanes zero; and the first n lanes stored to p. Neither
// touches memory past p + n, so rows need no padding.
inline f16 load_first(const float* p, int n) {
#if defined(__AVX512F__)
  return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
#else
  if (n == 16) return load(p);
  f16 v = {};
  for (int i = 0; i < n; ++i) v[i] = p[i];
  return v;
#endif
}
inline void store_first(float* p, f16 v, int n) {
#if defined(__AVX512F__)
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
#else
  if (n == 16) return store(p, v);
  for (int i = 0; i < n; ++i) p[i] = v[i];
#endif
}
// Makes the compiler treat v as computed here, so that it loads v once into a register instead
// of folding the load into every use. Only where one register holds 16 floats (AVX-512).
inline void keep_in_register([[maybe_unused]] f16& v) {
#if defined(__AVX512F__)
  asm("" : "+v"(v));
#endif
}
inline f16 splat(float x) { return f16{} + x; }
inline f16 relu(f16 v) { return v > 0.0f ? v : f16{}; }

// Sum of the 16 lanes as a tree (halves, then quarters): a short dependency chain.
inline float sum(f16 v) {
  f8 low, high;
  std::memcpy(&low, &v, sizeof low);
  std::memcpy(&high, reinterpret_cast<const char*>(&v) + sizeof low, sizeof high);
  const f8 eight = low + high;
  f4 a, b;
  std::memcpy(&a, &eight, sizeof a);
  std::memcpy(&b, reinterpret_cast<const char*>(&eight) + sizeof a, sizeof b);
  const f4 four = a + b;
  return (four[0] + four[2]) + (four[1] + four[3]);
}

}  // namespace cnnbench::simd
