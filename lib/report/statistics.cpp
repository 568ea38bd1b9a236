// Robust summaries of repeated timings: median and median absolute deviation next to the
// mean, min and max, so one noisy repetition doesn't move the headline number.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/records.hpp"
#include "cnnbench/report.hpp"

namespace cnnbench {

namespace {
// Median of values that are already sorted.
double sorted_median(const std::vector<double>& sorted) {
  const std::size_t n = sorted.size();
  return n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}
}  // namespace

Summary summarize(std::span<const double> values) {
  CNNBENCH_CHECK(!values.empty(), "cannot summarize an empty set of measurements");
  for (std::size_t i = 0; i < values.size(); ++i) {
    CNNBENCH_CHECK(std::isfinite(values[i]),
                   "cannot summarize measurements: value " + std::to_string(i) + " is not finite");
  }
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());

  Summary summary;
  summary.min = sorted.front();
  summary.max = sorted.back();
  summary.median = sorted_median(sorted);
  summary.mean =
      std::accumulate(sorted.begin(), sorted.end(), 0.0) / static_cast<double>(sorted.size());

  std::vector<double> deviations(sorted.size());
  std::transform(sorted.begin(), sorted.end(), deviations.begin(),
                 [&](double v) { return std::abs(v - summary.median); });
  std::sort(deviations.begin(), deviations.end());
  summary.mad = sorted_median(deviations);
  return summary;
}

nlohmann::json summary_json(const Summary& s) { return s; }

}  // namespace cnnbench
