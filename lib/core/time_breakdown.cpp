// The breakdown built from many workers' step timelines: the critical path (the busiest worker
// of each step), per-worker sums, the straggler, and ranks' waits for each other told apart
// from their waits for the network.
#include <algorithm>

#include "cnnbench/core.hpp"
#include "cnnbench/time_breakdown.hpp"

namespace cnnbench {

double excess_over_median_of_others(std::span<const double> busy, std::size_t unit,
                                    std::vector<double>& scratch) {
  if (busy.size() < 2) return 1.0;
  scratch.clear();  // keeps its capacity: no allocation once it has held every unit
  for (std::size_t u = 0; u < busy.size(); ++u) {
    if (u != unit) scratch.push_back(busy[u]);
  }
  std::sort(scratch.begin(), scratch.end());
  const std::size_t n = scratch.size();
  const double median = n % 2 == 1 ? scratch[n / 2] : 0.5 * (scratch[n / 2 - 1] + scratch[n / 2]);
  return median > 0 ? busy[unit] / median : 1.0;
}

BreakdownBuilder::BreakdownBuilder(std::vector<WorkerId> workers, std::string unit_kind,
                                   std::vector<int> unit_of)
    : unit_kind_(std::move(unit_kind)), unit_of_(std::move(unit_of)) {
  CNNBENCH_CHECK(unit_of_.size() == workers.size(), "breakdown: a unit for every worker");
  for (WorkerId& worker : workers) workers_.push_back({std::move(worker), {}});
  units_ = unit_of_.empty() ? 1 : *std::max_element(unit_of_.begin(), unit_of_.end()) + 1;
  unit_busy_sum_.assign(static_cast<std::size_t>(units_), 0.0);
  unit_busy_.assign(static_cast<std::size_t>(units_), 0.0);
}

void BreakdownBuilder::add_steps(std::span<const StepTimes> step, std::int64_t steps) {
  CNNBENCH_CHECK(step.size() == workers_.size() && !step.empty(),
                 "breakdown: a step needs the times of every worker");
  std::size_t critical = 0;
  std::fill(unit_busy_.begin(), unit_busy_.end(), 0.0);
  for (std::size_t w = 0; w < step.size(); ++w) {
    workers_[w].total += step[w];
    const double busy = step[w].busy();
    if (busy > step[critical].busy()) critical = w;
    double& unit = unit_busy_[static_cast<std::size_t>(unit_of_[w])];
    unit = std::max(unit, busy);
  }
  critical_ += step[critical];
  for (std::size_t u = 0; u < unit_busy_.size(); ++u) unit_busy_sum_[u] += unit_busy_[u];
  steps_ += steps;
}

TimeBreakdown BreakdownBuilder::result(std::vector<std::string> layer_names) const {
  TimeBreakdown out;
  out.steps = steps_;
  out.critical_path = critical_;
  out.layer_names = std::move(layer_names);
  out.workers = workers_;
  out.straggler.kind = unit_kind_;
  // Mean busy times, not a mean of per-step ratios: a step in which a loaded machine kept one
  // worker off its core moves the figure by that step's share of the time only.
  std::vector<double> scratch;
  for (std::size_t u = 0; u < unit_busy_sum_.size() && steps_ > 0 && units_ > 1; ++u) {
    const double excess = excess_over_median_of_others(unit_busy_sum_, u, scratch);
    if (u == 0 || excess > out.straggler.mean_excess) {
      out.straggler.id = static_cast<int>(u);
      out.straggler.mean_excess = excess;
    }
  }
  return out;
}

void separate_rank_imbalance(std::span<std::vector<StepTimes>> by_rank) {
  double last_arrival = 0;
  for (const auto& rank : by_rank) {
    for (const StepTimes& worker : rank) last_arrival = std::max(last_arrival, worker.arrival);
  }
  for (auto& rank : by_rank) {
    for (StepTimes& worker : rank) {
      const double waited = std::min(worker[TimeCategory::communication_exposed],
                                     std::max(0.0, last_arrival - worker.arrival));
      worker[TimeCategory::communication_exposed] -= waited;
      worker[TimeCategory::imbalance_wait] += waited;
    }
  }
}

}  // namespace cnnbench
