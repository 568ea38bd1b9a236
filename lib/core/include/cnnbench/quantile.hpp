// Order statistics of samples (timings, ratios): one definition for every part that summarises
// them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

namespace cnnbench {

// The q-quantile (0..1) of `values`, linearly interpolated between the two nearest order
// statistics (numpy's default); q = 0.5 is the median, the mean of the middle two for an even
// count. `if_empty` when there are none.
inline double quantile(std::vector<double> values, double q,
                       double if_empty = std::numeric_limits<double>::quiet_NaN()) {
  if (values.empty()) return if_empty;
  std::sort(values.begin(), values.end());
  const double position = q * static_cast<double>(values.size() - 1);
  const auto below = static_cast<std::size_t>(position);
  const std::size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (position - static_cast<double>(below)) * (values[above] - values[below]);
}

inline double median(std::vector<double> values,
                     double if_empty = std::numeric_limits<double>::quiet_NaN()) {
  return quantile(std::move(values), 0.5, if_empty);
}

}  // namespace cnnbench
