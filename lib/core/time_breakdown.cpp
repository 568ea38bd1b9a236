// The breakdown built from many workers' step timelines: the critical path (the busiest worker
// of each step), per-worker sums, the straggler, and ranks' waits for each other told apart
// from their waits for the network.
#include <algorithm>

#include "cnnbench/core.hpp"
#include "cnnbench/time_breakdown.hpp"

namespace cnnbench {

namespace {

// The median of values[u] for u != unit (there is at least one); `scratch` holds them sorted.
double median_of_others(std::span<const double> values, std::size_t unit,
                        std::vector<double>& scratch) {
  scratch.clear();  // keeps its capacity: no allocation once it has held every unit
  for (std::size_t u = 0; u < values.size(); ++u) {
    if (u != unit) scratch.push_back(values[u]);
  }
  std::sort(scratch.begin(), scratch.end());
  const std::size_t n = scratch.size();
  return n % 2 == 1 ? scratch[n / 2] : 0.5 * (scratch[n / 2 - 1] + scratch[n / 2]);
}

// The critical worker's step on this process's clock (see BreakdownBuilder::add_step).
StepTimes anchored_to(const StepTimes& times, double wall) {
  StepTimes out = times;
  out.wall = wall;
  const double difference = wall - times.wall;
  if (difference == 0 || times.wall <= 0) return out;
  double& exposed = out[TimeCategory::communication_exposed];
  double& imbalance = out[TimeCategory::imbalance_wait];
  const double waits = exposed + imbalance;
  if (waits + difference >= 0) {
    if (waits > 0) {
      const double scale = (waits + difference) / waits;
      exposed *= scale;
      imbalance *= scale;
    } else {
      exposed = difference;  // the step's end: the collective the ranks leave together
    }
    return out;
  }
  // The worker worked longer than this process's step lasted (skew between the ranks' leaving
  // the previous collective): everything shrinks in proportion.
  const double scale = wall / times.wall;
  for (double& s : out.seconds) s *= scale;
  for (double& s : out.layer_seconds) s *= scale;
  for (double& s : out.part_seconds) s *= scale;
  out.descheduled *= scale;
  return out;
}

}  // namespace

double excess_over_median_of_others(std::span<const double> busy, std::size_t unit,
                                    std::vector<double>& scratch) {
  if (busy.size() < 2) return 1.0;
  const double median = median_of_others(busy, unit, scratch);
  return median > 0 ? busy[unit] / median : 1.0;
}

double descheduled_share_of_excess(std::span<const double> busy,
                                   std::span<const double> descheduled, std::size_t unit,
                                   std::vector<double>& scratch) {
  if (busy.size() < 2) return 0.0;
  const double excess = busy[unit] - median_of_others(busy, unit, scratch);
  if (excess <= 0) return 0.0;
  const double others = median_of_others(descheduled, unit, scratch);
  return std::clamp((descheduled[unit] - others) / excess, 0.0, 1.0);
}

BreakdownBuilder::BreakdownBuilder(std::vector<WorkerId> workers, std::string unit_kind,
                                   std::vector<int> unit_of)
    : unit_kind_(std::move(unit_kind)), unit_of_(std::move(unit_of)) {
  CNNBENCH_CHECK(unit_of_.size() == workers.size(), "breakdown: a unit for every worker");
  for (WorkerId& worker : workers) workers_.push_back({std::move(worker), {}});
  units_ = unit_of_.empty() ? 1 : *std::max_element(unit_of_.begin(), unit_of_.end()) + 1;
  unit_busy_sum_.assign(static_cast<std::size_t>(units_), 0.0);
  unit_descheduled_sum_.assign(static_cast<std::size_t>(units_), 0.0);
  unit_busiest_.assign(static_cast<std::size_t>(units_), 0);
}

void BreakdownBuilder::add_steps(std::span<const StepTimes> step, std::int64_t steps,
                                 double wall) {
  CNNBENCH_CHECK(step.size() == workers_.size() && !step.empty(),
                 "breakdown: a step needs the times of every worker");
  std::size_t critical = 0;
  constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::fill(unit_busiest_.begin(), unit_busiest_.end(), none);
  for (std::size_t w = 0; w < step.size(); ++w) {
    workers_[w].total += step[w];
    const double busy = step[w].busy();
    if (busy > step[critical].busy()) critical = w;
    std::size_t& busiest = unit_busiest_[static_cast<std::size_t>(unit_of_[w])];
    if (busiest == none || busy > step[busiest].busy()) busiest = w;
  }
  critical_ += anchored_to(step[critical], wall);
  range_wall_ += wall;
  for (std::size_t u = 0; u < unit_busiest_.size(); ++u) {
    if (unit_busiest_[u] == none) continue;
    unit_busy_sum_[u] += step[unit_busiest_[u]].busy();
    unit_descheduled_sum_[u] += step[unit_busiest_[u]].descheduled;
  }
  steps_ += steps;
}

void BreakdownBuilder::end_range(double seconds, double descheduled_outside_steps) {
  const double rest = std::max(0.0, seconds - range_wall_);
  critical_[TimeCategory::other] += rest;
  critical_.wall += rest;
  const double descheduled = std::clamp(descheduled_outside_steps, 0.0, rest);
  critical_.descheduled += descheduled;
  other_descheduled_ += descheduled;
  range_wall_ = 0;
}

TimeBreakdown BreakdownBuilder::result(std::vector<std::string> layer_names) const {
  TimeBreakdown out;
  out.steps = steps_;
  out.critical_path = critical_;
  out.other_descheduled = other_descheduled_;
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
  if (units_ > 1 && steps_ > 0) {
    out.straggler.descheduled_share = descheduled_share_of_excess(
        unit_busy_sum_, unit_descheduled_sum_, static_cast<std::size_t>(out.straggler.id), scratch);
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
