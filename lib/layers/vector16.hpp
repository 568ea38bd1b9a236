// Sixteen floats as one value (GCC/Clang vector extensions): one AVX-512 register where the build
// targets it, two AVX2 or four SSE registers elsewhere. Loads and stores need no alignment.
#pragma once

#include <cstring>

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
