// The equivalence tests' criterion for two flat parameter buffers: for every tensor of the model,
// max|got - want| / max|want| within the tolerance. A failure names the tensor and its worst
// element.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>

#include "cnnbench/models.hpp"

namespace cnnbench {

// The tensor whose max|got - want| / max|want| is largest, and that figure.
struct TensorDifference {
  double relative = 0;
  std::string tensor;
};

inline double relative_tensor_difference(std::span<const float> got, std::span<const float> want,
                                         const ParamTensor& tensor) {
  double max_diff = 0, max_ref = 0;
  for (std::size_t i = tensor.offset; i < tensor.offset + tensor.count; ++i) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(got[i]) - want[i]));
    max_ref = std::max(max_ref, std::abs(static_cast<double>(want[i])));
  }
  return max_ref > 0 ? max_diff / max_ref : max_diff;
}

inline TensorDifference largest_tensor_difference(std::span<const float> got,
                                                  std::span<const float> want, ModelKind kind) {
  TensorDifference largest;
  if (got.size() != want.size()) return {INFINITY, "(sizes differ)"};
  for (const ParamTensor& tensor : model_spec(kind).tensors) {
    const double relative = relative_tensor_difference(got, want, tensor);
    if (!(relative <= largest.relative)) largest = {relative, tensor.name};
  }
  return largest;
}

inline void expect_tensors_close(std::span<const float> got, std::span<const float> want,
                                 ModelKind kind, double tolerance, const std::string& what,
                                 const std::string& tensor_prefix = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const ParamTensor& tensor : model_spec(kind).tensors) {
    double max_diff = 0, max_ref = 0;
    std::size_t worst = tensor.offset;
    for (std::size_t i = tensor.offset; i < tensor.offset + tensor.count; ++i) {
      const double diff = std::abs(static_cast<double>(got[i]) - want[i]);
      if (diff > max_diff) {
        max_diff = diff;
        worst = i;
      }
      max_ref = std::max(max_ref, std::abs(static_cast<double>(want[i])));
    }
    const double relative = max_ref > 0 ? max_diff / max_ref : max_diff;
    EXPECT_LE(relative, tolerance)
        << what << ": " << tensor_prefix << tensor.name << " max|a-b|/max|b| = " << relative
        << " at element " << worst - tensor.offset << ": " << got[worst] << " vs "
        << want[worst];
  }
}

}  // namespace cnnbench
