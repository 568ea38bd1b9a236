// The training plan's sample lookup and the flow-control table's share rule.
#include "training_run.hpp"

#include "cnnbench/balance.hpp"
#include "cnnbench/core.hpp"

namespace cnnbench {

const std::uint32_t* TrainingPlan::samples_of(std::int64_t sequence) const {
  const std::int64_t step = sequence / microbatches - range.global_first;
  const std::int64_t m = sequence % microbatches;
  CNNBENCH_CHECK(step >= 0 && step < range.count, "stream: micro-batch " +
                                                      std::to_string(sequence) +
                                                      " lies outside the current step range");
  return range.order + (range.first + step) * batch + m * micro_batch;
}

FlowTable::FlowTable(const TrainingPlan& plan)
    : window_(plan.window), copies_(plan.sample_groups), microbatches_(plan.microbatches),
      part_(plan.part), balance_dynamic_(plan.balance_dynamic),
      shares_(std::size_t(copies_), plan.micro_batch / copies_),
      copy_samples_(std::size_t(copies_), 0),
      counts_(std::size_t(window_) * std::size_t(copies_), 0),
      offsets_(counts_.size(), 0),
      busy_ns_(std::make_unique<std::atomic<std::int64_t>[]>(std::size_t(copies_))),
      busy_seen_(std::size_t(copies_), 0) {}

void FlowTable::add_busy(int copy, double seconds) {
  busy_ns_[std::size_t(copy)].fetch_add(static_cast<std::int64_t>(seconds * 1e9),
                                        std::memory_order_relaxed);
}

// Dynamic balancing reads what each copy spent since the last group and moves samples from the
// slowest copy to the fastest toward equal times (the cluster's rule: equalize_times, 5%
// tolerance).
void FlowTable::assign_shares(std::int64_t sequence) {
  if (balance_dynamic_ && copies_ > 1 && sequence % microbatches_ == 0) {
    std::vector<double> seconds(shares_.size());
    bool measured = true;
    for (std::size_t c = 0; c < shares_.size(); ++c) {
      const std::int64_t busy = busy_ns_[c].load(std::memory_order_relaxed);
      seconds[c] = double(busy - busy_seen_[c]) * 1e-9;
      busy_seen_[c] = busy;
      measured = measured && seconds[c] > 0;
    }
    if (measured) shares_ = equalize_times(shares_, seconds, 1, part_, 0.05);
  }
  int offset = 0;
  for (int c = 0; c < copies_; ++c) {
    counts_[slot(sequence, c)] = shares_[std::size_t(c)];
    copy_samples_[std::size_t(c)] += shares_[std::size_t(c)];
    offsets_[slot(sequence, c)] = offset;
    offset += shares_[std::size_t(c)];
  }
}

}  // namespace cnnbench
