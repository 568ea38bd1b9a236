// Parameter blocks: loading and storing their runs of the model, the weight buffers each
// consistency mode reads, and the update when every copy's gradients of a group are in.
#include "param_block.hpp"

#include "cnnbench/models.hpp"

namespace cnnbench {

ParamBlock::ParamBlock(std::string name, std::vector<Run> runs, const TrainingPlan& plan)
    : name_(std::move(name)), runs_(std::move(runs)), plan_(plan), copies_(plan.sample_groups) {
  for (const Run& r : runs_) size_ += r.count;
  for (auto& w : weights_) w.assign(size_, 0.0f);
  grads_.assign(std::size_t(copies_) * 2, aligned_vector<float>(size_, 0.0f));
  for (std::size_t parity = 0; parity < 2; ++parity) {
    parts_[parity].clear();
    for (std::size_t c = 0; c < std::size_t(copies_); ++c) {
      parts_[parity].push_back(grads_[c * 2 + parity].data());
    }
  }
  momentum_.assign(size_, 0.0f);
  staleness_.resize(static_cast<std::size_t>(copies_));
  lazy_ = copies_ > 1 && plan.consistency == Consistency::strict;
}

void ParamBlock::load(const Model& model) {
  std::size_t at = 0;
  for (const Run& r : runs_) {
    std::copy_n(model.params.data() + r.offset, r.count, weights_[0].data() + at);
    std::copy_n(model.momentum.data() + r.offset, r.count, momentum_.data() + at);
    at += r.count;
  }
  weights_[1] = weights_[0];
  buffer_version_[0] = buffer_version_[1] = 0;
  for (auto& grads : grads_) std::fill(grads.begin(), grads.end(), 0.0f);
  updates_.store(0);
  for (auto& pending : pending_) pending.store(copies_);
  due_.store(0);
  for (auto& histogram : staleness_) histogram.clear();
}

void ParamBlock::store(Model& model) {
  settle();
  const int newest = buffer_version_[1] > buffer_version_[0] ? 1 : 0;
  std::size_t at = 0;
  for (const Run& r : runs_) {
    std::copy_n(weights_[newest].data() + at, r.count, model.params.data() + r.offset);
    std::copy_n(momentum_.data() + at, r.count, model.momentum.data() + r.offset);
    at += r.count;
  }
}

// group-async: group g computes on the buffer its group-before-last's update wrote, (g + 1) % 2,
// while group g - 1's update lands in the other one.
int ParamBlock::buffer_for(std::int64_t sequence) const {
  if (plan_.consistency != Consistency::group_async) return 0;
  return static_cast<int>((sequence / plan_.microbatches + 1) & 1);
}

float* ParamBlock::weights_for(std::int64_t sequence) {
  settle();
  return weights_[buffer_for(sequence)].data();
}

std::int64_t ParamBlock::version_for(std::int64_t sequence) {
  settle();
  return buffer_version_[buffer_for(sequence)];
}

void ParamBlock::settle() {
  if (!lazy_) return;
  int state = due_.load(std::memory_order_acquire);
  if (state == 0) return;
  if (state == 1 && due_.compare_exchange_strong(state, 2, std::memory_order_acq_rel)) {
    update(due_group_);
    due_.store(0, std::memory_order_release);
    return;
  }
  while (due_.load(std::memory_order_acquire) != 0) {
  }
}

float* ParamBlock::grads(std::int64_t sequence, int copy) {
  const auto parity = static_cast<std::size_t>((sequence / plan_.microbatches) & 1);
  return grads_[std::size_t(copy) * 2 + parity].data();
}

std::vector<std::int64_t> ParamBlock::staleness() const {
  std::vector<std::int64_t> total;
  for (const auto& histogram : staleness_) {
    if (total.size() < histogram.size()) total.resize(histogram.size(), 0);
    for (std::size_t s = 0; s < histogram.size(); ++s) total[s] += histogram[s];
  }
  return total;
}

void ParamBlock::finish_backward(std::int64_t sequence, std::int64_t version_used, int copy) {
  const auto staleness = static_cast<std::size_t>(
      std::max<std::int64_t>(0, updates_.load(std::memory_order_relaxed) - version_used));
  std::vector<std::int64_t>& histogram = staleness_[std::size_t(copy)];
  if (histogram.size() <= staleness) histogram.resize(staleness + 1, 0);
  ++histogram[staleness];
  if (sequence % plan_.microbatches != plan_.microbatches - 1) return;
  // This copy's share of the group is in; the last copy to get here updates (acq_rel: it sees
  // every other copy's gradients). Nobody touches this parity again before the sink has seen
  // the group, so the counter can be re-armed here.
  const std::int64_t group = sequence / plan_.microbatches;
  std::atomic<int>& pending = pending_[group & 1];
  if (copies_ > 1 && pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  pending.store(copies_, std::memory_order_relaxed);
  if (lazy_) {
    due_group_ = group;
    due_.store(1, std::memory_order_release);
    return;
  }
  update(group);
}

// The group's gradients are complete: the copies' sums added in copy order, then one SGD step,
// as serial does once per batch, and the buffers zeroed for the group after next.
void ParamBlock::update(std::int64_t group) {
  const auto parity = static_cast<std::size_t>(group & 1);
  int target = 0;
  if (plan_.consistency == Consistency::group_async) {
    target = static_cast<int>((group + 1) & 1);
    weights_[target] = weights_[1 - target];
  }
  sum_sgd_step_and_clear(weights_[target].data(), parts_[parity].data(), copies_, momentum_.data(),
                         size_, plan_.sgd);
  buffer_version_[target] = updates_.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace cnnbench
