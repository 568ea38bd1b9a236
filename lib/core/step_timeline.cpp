// The step timeline's bookkeeping and the breakdown built from many workers' timelines: the
// critical path (the busiest worker of each step), per-worker sums and the straggler.
#include <algorithm>

#include "cnnbench/core.hpp"
#include "cnnbench/time_breakdown.hpp"

namespace cnnbench {

const char* time_category_key(TimeCategory category) {
  switch (category) {
    case TimeCategory::compute: return "compute_s";
    case TimeCategory::update: return "update_s";
    case TimeCategory::reduce: return "reduce_s";
    case TimeCategory::communication_exposed: return "communication_exposed_s";
    case TimeCategory::imbalance_wait: return "imbalance_wait_s";
    case TimeCategory::fill_drain: return "fill_drain_s";
    case TimeCategory::starvation: return "starvation_s";
    case TimeCategory::data: return "data_s";
    case TimeCategory::other: return "other_s";
  }
  return "other_s";
}

double StepTimes::busy() const {
  return wall - (*this)[TimeCategory::communication_exposed] -
         (*this)[TimeCategory::imbalance_wait] - (*this)[TimeCategory::fill_drain] -
         (*this)[TimeCategory::starvation];
}

StepTimes& StepTimes::operator+=(const StepTimes& other) {
  for (std::size_t c = 0; c < seconds.size(); ++c) seconds[c] += other.seconds[c];
  for (std::size_t l = 0; l < layer_seconds.size(); ++l) layer_seconds[l] += other.layer_seconds[l];
  wall += other.wall;
  arrival += other.arrival;
  return *this;
}

std::vector<Span> SpanRing::spans() const {
  const std::size_t n = std::min(next_, spans_.size());
  std::vector<Span> out;
  out.reserve(n);
  for (std::size_t i = next_ - n; i < next_; ++i) out.push_back(spans_[i % spans_.size()]);
  return out;
}

void StepTimeline::begin_step(ClockTicks now) {
  current_ = StepTimes{};
  step_start_ = cursor_ = now;
}

void StepTimeline::end_step(ClockTicks now) {
  add(TimeCategory::other, -1, now);
  current_.wall = seconds(step_start_, now);
  steps_.push_back(current_);
}

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
