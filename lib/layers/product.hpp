// The one matrix product the dense layers run on (lib/layers/dense.cpp): its operands as strided
// views, so that forward, backward and their transposed forms are all the same kernel.
#pragma once

#include <cstddef>

namespace cnnbench::dense_kernel {

// C (rows, cols) from A (rows, depth) and B (depth, cols): row r of C at c + r * c_row, A[r][k] at
// a + r * a_row + k * a_k (read one float at a time), row k of B at b + k * b_k (read as vectors).
struct Product {
  const float* a;
  std::ptrdiff_t a_row, a_k;
  const float* b;
  std::ptrdiff_t b_k;
  float* c;
  std::ptrdiff_t c_row;
  int rows, cols, depth;
};

// What C's block starts from before the sum over depth is added: zero (C is overwritten), C
// itself (accumulated), init[r] for row r, or init[j] for column j (a bias either way).
enum class Start { zero, accumulate, row_value, column_value };

}  // namespace cnnbench::dense_kernel
