// Parameter blocks, the unit of ownership of the stream graph: one forward/backward actor pair
// (per copy of the net) owns packed runs of the model's parameters with their gradients,
// momentum and weight versions; and the stash a forward actor leaves for its backward partner.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/models.hpp"
#include "training_run.hpp"

namespace cnnbench {

// A block of parameters owned by one forward/backward actor pair (so by one core): packed copies
// of some runs of the model's flat buffers, with their gradients and momentum, and the version
// bookkeeping of the consistency modes.
class ParamBlock {
 public:
  struct Run {
    std::size_t offset = 0, count = 0;  // in the model's flat buffer
  };
  ParamBlock(std::string name, std::vector<Run> runs, const TrainingPlan& plan);

  const std::string& name() const { return name_; }
  std::size_t size() const { return size_; }
  void load(const Model& model);   // params and momentum from the model; versions restart
  void store(Model& model);  // the newest params and momentum into the model

  // The weights micro-batch `sequence` uses (forward and backward alike) and their version.
  float* weights_for(std::int64_t sequence);
  std::int64_t version_for(std::int64_t sequence);
  // Where copy `copy` of the net adds the gradients of micro-batch `sequence`.
  float* grads(std::int64_t sequence, int copy);
  // After the backward of `sequence` by copy `copy` added its gradients: counts its staleness
  // and, when the last copy finishes a group, sums the copies' gradients in copy order and
  // applies SGD: at once on that copy's thread, or, in strict with several copies, in the first
  // copy to need the weights again (see settle()).
  void finish_backward(std::int64_t sequence, std::int64_t version_used, int copy);
  std::vector<std::int64_t> staleness() const;  // histogram: staleness -> micro-batches

 private:
  int buffer_for(std::int64_t sequence) const;
  void update(std::int64_t group);
  // strict with several copies: the group's update waits until a copy next reads the weights.
  // The last copy to finish a group is the slowest one, and strict drains before the next group,
  // so the copy that runs ahead does the sum and the step while the slow one catches up; a copy
  // that finds it under way waits for it (never for long: the claimant is running it).
  void settle();

  std::string name_;
  std::vector<Run> runs_;
  std::size_t size_ = 0;
  const TrainingPlan& plan_;
  aligned_vector<float> weights_[2];  // group-async keeps two versions; the others use [0]
  std::int64_t buffer_version_[2] = {0, 0};
  // Gradients per copy and per group parity (with several copies, one copy may start group g + 1
  // while the last one still sums group g).
  int copies_ = 1;
  std::vector<aligned_vector<float>> grads_;  // [copy * 2 + parity]
  std::vector<float*> parts_[2];              // per parity: each copy's gradients, in copy order
  aligned_vector<float> momentum_;
  std::atomic<std::int64_t> updates_{0};
  std::atomic<int> pending_[2] = {1, 1};  // copies yet to finish the group, per parity
  bool lazy_ = false;                      // strict with several copies
  std::atomic<int> due_{0};                // lazy: 0 none, 1 an update is due, 2 one is running
  std::int64_t due_group_ = 0;
  std::vector<std::vector<std::int64_t>> staleness_;  // per copy
};

// What a forward actor keeps of each micro-batch for its backward partner (same core): a ring of
// `depth` entries, one per micro-batch that can be in flight. An entry points into a token that
// the forward actor popped or pushed and whose channel retains `depth` tokens (see retained()):
// the sink -> source feedback edge lets no more than `depth` micro-batches be in flight, so the
// slot is not reused before the backward partner has read it. No copies.
class Stash {
 public:
  explicit Stash(int depth)
      : depth_(depth), sequences_(static_cast<std::size_t>(depth), -1),
        versions_(static_cast<std::size_t>(depth), 0),
        data_(static_cast<std::size_t>(depth), nullptr) {}
  int depth() const { return depth_; }
  void keep(std::int64_t sequence, std::int64_t version, const float* data) {
    const std::size_t slot = slot_of(sequence);
    sequences_[slot] = sequence;
    versions_[slot] = version;
    data_[slot] = data;
  }
  const float* get(std::int64_t sequence, const std::string& owner) const {
    const std::size_t slot = slot_of(sequence);
    CNNBENCH_CHECK(sequences_[slot] == sequence,
                   owner + ": no saved forward state for micro-batch " + std::to_string(sequence));
    return data_[slot];
  }
  std::int64_t version(std::int64_t sequence) const { return versions_[slot_of(sequence)]; }

 private:
  std::size_t slot_of(std::int64_t sequence) const {
    return static_cast<std::size_t>(sequence) % sequences_.size();
  }
  int depth_;
  std::vector<std::int64_t> sequences_;
  std::vector<std::int64_t> versions_;
  std::vector<const float*> data_;
};

// The older of two weight versions, -1 meaning none yet.
inline std::int64_t oldest_version(std::int64_t a, std::int64_t b) {
  if (a < 0) return b;
  if (b < 0) return a;
  return std::min(a, b);
}

}  // namespace cnnbench
