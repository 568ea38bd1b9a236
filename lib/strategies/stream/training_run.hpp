// What the actors of the training graph share besides their channels: the read-only plan of the
// run and the flow-control table of the copies' sample shares.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "cnnbench/stream_options.hpp"
#include "cnnbench/train.hpp"

namespace cnnbench {

// The run as the actors see it: nothing here changes while the graph runs. The strategy sets
// the step range and callback between executor runs, the builder the rest before the first.
struct TrainingPlan {
  const Dataset* data = nullptr;
  ModelKind model = ModelKind::lenet5;
  int batch = 64;
  int microbatches = 4;
  int micro_batch = 16;
  Consistency consistency = Consistency::strict;
  // Micro-batches that may be in flight at once: the initial tokens of the sink -> source
  // feedback edge (strict: one group, the others two, so that a group overlaps the last one).
  int window = 4;
  // Sample fission: the net is built this many times, each copy training on its own slice of
  // every micro-batch (part samples), and the copies' gradients are summed before each update.
  int sample_groups = 1;
  int part = 16;  // the most samples a copy gets: micro_batch / sample_groups, more when balancing
  int cores = 1;
  bool balance_dynamic = false;  // --balance dynamic: shares follow the copies' busy times
  int slow_copy = -1;  // --slowdown N:FACTOR (testing): copy N's actors take FACTOR x longer
  double slow_factor = 1.0;
  SgdConfig sgd;

  StepRange range;
  const StepCallback* on_step = nullptr;

  // The sample indices of micro-batch `sequence` of the current range.
  const std::uint32_t* samples_of(std::int64_t sequence) const;
};

// The flow-control table: how the source deals each micro-batch's samples to the copies of the
// net, the one thing the actors share outside their channels. Who writes and who reads:
//   counts, offsets  the source, for micro-batch s before it pushes s; every actor of a copy
//                    after it popped s (the channels' release/acquire order the two). A ring of
//                    `window` micro-batches: the feedback edge keeps no more in flight.
//   busy             each copy's actors add their firing times (relaxed atomics); the source
//                    reads them at a group's first micro-batch to re-balance (--balance dynamic).
//                    A measurement: no result depends on when an addition lands.
//   shares, samples  the source only (and metrics after the run).
class FlowTable {
 public:
  FlowTable() = default;
  explicit FlowTable(const TrainingPlan& plan);  // equal shares of the micro-batch

  // The source, before emitting `sequence`: at a group's first micro-batch under dynamic
  // balancing, re-size the shares toward equal busy times; then record the micro-batch's.
  void assign_shares(std::int64_t sequence);
  // Samples of micro-batch `sequence` that copy `copy` trains on, and where they start.
  int count(std::int64_t sequence, int copy) const { return counts_[slot(sequence, copy)]; }
  int offset(std::int64_t sequence, int copy) const { return offsets_[slot(sequence, copy)]; }
  void add_busy(int copy, double seconds);  // any actor of copy `copy`

  const std::vector<int>& shares() const { return shares_; }  // as the last group ran
  const std::vector<std::int64_t>& copy_samples() const { return copy_samples_; }  // whole run

 private:
  std::size_t slot(std::int64_t sequence, int copy) const {
    return std::size_t(sequence % window_) * std::size_t(copies_) + std::size_t(copy);
  }

  int window_ = 1, copies_ = 1, microbatches_ = 1, part_ = 1;
  bool balance_dynamic_ = false;
  std::vector<int> shares_;
  std::vector<std::int64_t> copy_samples_;
  std::vector<int> counts_, offsets_;  // window x copies
  std::unique_ptr<std::atomic<std::int64_t>[]> busy_ns_;
  std::vector<std::int64_t> busy_seen_;  // the source's last reading of busy_ns_
};

}  // namespace cnnbench
