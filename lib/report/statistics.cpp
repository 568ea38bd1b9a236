// Robust summaries of repeated timings: median and median absolute deviation next to the
// mean, min and max, so one noisy repetition doesn't move the headline number.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/quantile.hpp"
#include "cnnbench/records.hpp"
#include "cnnbench/report.hpp"

namespace cnnbench {

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
  summary.median = median(sorted);
  summary.mean =
      std::accumulate(sorted.begin(), sorted.end(), 0.0) / static_cast<double>(sorted.size());

  std::vector<double> deviations(sorted.size());
  std::transform(sorted.begin(), sorted.end(), deviations.begin(),
                 [&](double v) { return std::abs(v - summary.median); });
  summary.mad = median(deviations);
  return summary;
}

nlohmann::json summary_json(const Summary& s) { return s; }

}  // namespace cnnbench
