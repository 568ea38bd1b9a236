// The GPU strategy's (gpu_strategy.hpp) ranges of steps: the per-range arrays, each step's batch
// on the device (resident indices, or streamed slots whose copies run under the previous step),
// the step enqueued whole or, with several ranks, in two parts around the host's gradient sum,
// and where the time went: the copies' and compute's events, the device's stamps replayed into
// the breakdown, and the host thread's spans for a trace.
#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "../cluster/cluster_metrics.hpp"
#include "cnnbench/core.hpp"
#include "gpu_strategy.hpp"

namespace cnnbench::gpu {

void GpuStrategy::run_range(const StepRange& range, const StepCallback& on_step) {
  if (range.count <= 0) return;
  const ClockTicks range_start = clock_ticks();
  host_step_ = range.global_first;
  CNNBENCH_CUDA(cudaSetDevice(device_));
  reserve_range(range.count);
  range_allreduce_seconds_ = 0;
  CNNBENCH_CUDA(cudaMemsetAsync(launch_[0].buffers.step, 0, sizeof(int), compute_.get()));
  if (mode_ == DataMode::resident) {
    run_resident(range);
  } else {
    run_streamed(range);
  }
  CNNBENCH_CUDA(cudaMemcpyAsync(loss_sums_host_.data(), loss_sums_.data(),
                                sizeof(double) * static_cast<std::size_t>(range.count),
                                cudaMemcpyDeviceToHost, compute_.get()));
  CNNBENCH_CUDA(cudaMemcpyAsync(stamps_host_.data(), stamps_.data(),
                                sizeof(std::uint64_t) * stamps_per_range(range.count),
                                cudaMemcpyDeviceToHost, compute_.get()));
  const ClockTicks wait_start = clock_ticks();
  CNNBENCH_CUDA(cudaStreamSynchronize(compute_.get()));
  const ClockTicks synchronized = clock_ticks();
  host_span(wait_start, synchronized, TimeCategory::other, host_step_ - 1);  // the range's last
  account_timings(range.count);
  replay_device_stamps(range.count, range_start, synchronized);
  steps_run_ += range.count;
  if (multi_rank_) {
    // Each rank holds the loss sums of its shares; the global batch's are their sum.
    ranks_->sum_in_rank_order(loss_sums_host_.data(), static_cast<std::size_t>(range.count));
    gather_rank_metrics();
  }
  for (std::int64_t i = 0; i < range.count; ++i) {
    on_step(i, loss_sums_host_.data()[i] / batch_);
  }
  // The read-back, the replay, the ranks' metrics and the callbacks after the last stamp.
  breakdown_.end_range(1e-9 * double(clock_ticks() - range_start));
}

std::size_t GpuStrategy::stamps_per_range(std::int64_t steps) const {
  return static_cast<std::size_t>(steps) * static_cast<std::size_t>(stamps_plan_.per_step());
}

// The range's stamps into the device timeline, then (collective) every rank's steps into the
// breakdown. The device's clock meets the host's at the last stamp: the step counter's advance,
// the losses' and the stamps' copies ran between it and `synchronized`, a few microseconds.
void GpuStrategy::replay_device_stamps(std::int64_t count, ClockTicks range_start,
                                       ClockTicks synchronized) {
  const std::size_t n = stamps_per_range(count);
  const std::uint64_t last = stamps_host_.data()[n - 1];
  const DeviceRangeStamps stamps{std::span<const std::uint64_t>(stamps_host_.data(), n),
                                 range_start, synchronized - static_cast<ClockTicks>(last)};
  device_timeline_.reserve_steps(static_cast<std::size_t>(count));
  device_timeline_.number_steps_from(host_step_ - count);
  replay_device_range(device_timeline_, stamps_plan_.groups, stamps, count,
                      mode_ == DataMode::stream);
  auto steps = gather_step_times(*ranks_, {&device_timeline_});
  std::vector<StepTimes> flat;
  for (auto& by_rank : steps) {
    if (multi_rank_) separate_rank_imbalance(by_rank);
    flat.clear();
    for (const auto& rank : by_rank) flat.insert(flat.end(), rank.begin(), rank.end());
    // Every rank's device steps cover its range: its wall on this rank's clock.
    breakdown_.add_step(flat, by_rank[static_cast<std::size_t>(ranks_->rank())][0].wall);
  }
  device_timeline_.clear_steps();
}

// A span of the host thread's track, when a trace keeps them, in the step the host is at.
void GpuStrategy::host_span(ClockTicks start, ClockTicks end, TimeCategory category) {
  host_span(start, end, category, host_step_);
}

// A span of the host thread's track, when a trace keeps them.
void GpuStrategy::host_span(ClockTicks start, ClockTicks end, TimeCategory category,
                            std::int64_t step) {
  if (!host_spans_) return;
  Span span;
  span.start = start;
  span.end = end;
  span.step = step;
  span.category = category;
  host_spans_->push(span);
}

// The host has enqueued step host_step_: its later spans belong to the next one.
void GpuStrategy::host_step_done() {
  if (host_spans_) host_spans_->end_step();
  ++host_step_;
}

// Per-range arrays: indices (resident), loss sums and timing events. Growing them moves
// pointers that captured graphs hold, so those graphs are dropped and captured again.
void GpuStrategy::reserve_range(std::int64_t count) {
  const auto n = static_cast<std::size_t>(count);
  if (loss_sums_.size() < n) {
    loss_sums_ = DeviceBuffer<double>(n);
    loss_sums_host_ = PinnedBuffer<double>(n);
    if (mode_ == DataMode::resident) {
      const std::size_t index_count = n * static_cast<std::size_t>(share_.count);
      indices_ = DeviceBuffer<std::uint32_t>(index_count);
      indices_host_ = PinnedBuffer<std::uint32_t>(index_count);
    }
    stamps_ = DeviceBuffer<std::uint64_t>(stamps_per_range(count));  // (steps, groups + 1)
    stamps_host_ = PinnedBuffer<std::uint64_t>(stamps_.size());
    for (int slot = 0; slot < 2; ++slot) {
      launch_[slot].stamps = stamps_.data();
      launch_[slot].buffers.step_loss_sums = loss_sums_.data();
      if (mode_ == DataMode::resident) launch_[slot].source.indices = indices_.data();
    }
    graphs_.drop_all();
  }
  const std::size_t events = mode_ == DataMode::stream ? n : 1;
  while (copy_start_.size() < events) {
    copy_start_.push_back(make_event());
    copy_end_.push_back(make_event());
    compute_start_.push_back(make_event());
    compute_end_.push_back(make_event());
  }
}

void GpuStrategy::run_resident(const StepRange& range) {
  const auto share = static_cast<std::size_t>(share_.count);
  const auto index_count = static_cast<std::size_t>(range.count) * share;
  const std::uint32_t* order = range.order + range.first * batch_;
  const ClockTicks gather_start = clock_ticks();
  // The copy goes from pinned memory (range.order is pageable; the previous range's copy has
  // finished: run_range waits for compute_). The gather reads (steps, S) indices: this rank's
  // columns of the range's (steps, B), all of it on one rank.
  if (share_.count == batch_) {
    std::memcpy(indices_host_.data(), order, sizeof(std::uint32_t) * index_count);
  } else {
    for (std::int64_t i = 0; i < range.count; ++i) {
      std::memcpy(indices_host_.data() + static_cast<std::size_t>(i) * share,
                  order + i * batch_ + share_.offset, sizeof(std::uint32_t) * share);
    }
  }
  host_span(gather_start, clock_ticks(), TimeCategory::data);
  CNNBENCH_CUDA(cudaEventRecord(copy_start_[0].get(), compute_.get()));
  CNNBENCH_CUDA(cudaMemcpyAsync(indices_.data(), indices_host_.data(),
                                sizeof(std::uint32_t) * index_count, cudaMemcpyHostToDevice,
                                compute_.get()));
  CNNBENCH_CUDA(cudaEventRecord(copy_end_[0].get(), compute_.get()));
  copy_bytes_ += static_cast<double>(sizeof(std::uint32_t) * index_count);
  CNNBENCH_CUDA(cudaEventRecord(compute_start_[0].get(), compute_.get()));
  for (std::int64_t i = 0; i < range.count; ++i) run_step(0);
  CNNBENCH_CUDA(cudaEventRecord(compute_end_[0].get(), compute_.get()));
}

// Step i computes from slot i % 2 while the copy of step i + 1 fills the other slot.
void GpuStrategy::run_streamed(const StepRange& range) {
  const std::uint32_t* order = range.order + range.first * batch_;
  auto prefetch = [&](std::int64_t i) {
    const int slot = static_cast<int>(i % 2);
    // The host slot is free once its previous copy is done; the device slot once the step
    // that read it (i - 2) has finished.
    if (i >= 2) CNNBENCH_CUDA(cudaEventSynchronize(copy_end_[i - 2].get()));
    const ClockTicks gather_start = clock_ticks();
    gather_batch_bytes(slot_host_[slot].data(), order + i * batch_ + share_.offset);
    host_span(gather_start, clock_ticks(), TimeCategory::data);
    if (i >= 2) CNNBENCH_CUDA(cudaStreamWaitEvent(copy_.get(), compute_end_[i - 2].get(), 0));
    CNNBENCH_CUDA(cudaEventRecord(copy_start_[i].get(), copy_.get()));
    CNNBENCH_CUDA(cudaMemcpyAsync(slot_device_[slot].data(), slot_host_[slot].data(),
                                  slot_host_[slot].size(), cudaMemcpyHostToDevice, copy_.get()));
    CNNBENCH_CUDA(cudaEventRecord(copy_end_[i].get(), copy_.get()));
    copy_bytes_ += static_cast<double>(slot_host_[slot].size());
  };
  prefetch(0);
  if (range.count > 1) prefetch(1);
  for (std::int64_t i = 0; i < range.count; ++i) {
    CNNBENCH_CUDA(cudaStreamWaitEvent(compute_.get(), copy_end_[i].get(), 0));
    CNNBENCH_CUDA(cudaEventRecord(compute_start_[i].get(), compute_.get()));
    run_step(static_cast<int>(i % 2));
    CNNBENCH_CUDA(cudaEventRecord(compute_end_[i].get(), compute_.get()));
    if (i + 2 < range.count) prefetch(i + 2);
  }
}

// images (S,784) then labels (S) of the samples order[0..S), S = this rank's share.
void GpuStrategy::gather_batch_bytes(std::uint8_t* slot, const std::uint32_t* order) const {
  const std::size_t size = data_->image_size();
  std::uint8_t* labels = slot + static_cast<std::size_t>(share_.count) * size;
  for (int b = 0; b < share_.count; ++b) {
    std::memcpy(slot + b * size, data_->images.data() + order[b] * size, size);
    labels[b] = data_->labels[order[b]];
  }
}

// One step from batch slot `slot`. On one rank it is all enqueued; with several ranks the host
// waits for this rank's gradients, sums them over the ranks, and enqueues the update.
// The host track shows the enqueues as `other`, the wait for this rank's gradients and their
// sum over the ranks as `communication_exposed`.
void GpuStrategy::run_step(int slot) {
  const ClockTicks enqueue_start = clock_ticks();
  if (!multi_rank_) {
    enqueue_part(slot, StepPart::whole_step);
    host_span(enqueue_start, clock_ticks(), TimeCategory::other);
    host_step_done();
    return;
  }
  enqueue_part(slot, StepPart::forward_backward);
  const ClockTicks wait_start = clock_ticks();
  host_span(enqueue_start, wait_start, TimeCategory::other);
  CNNBENCH_CUDA(cudaStreamSynchronize(compute_.get()));
  const double start = now_seconds();
  ranks_->sum_in_rank_order(grads_host_.data(), grads_host_.size());
  const double seconds = now_seconds() - start;
  allreduce_seconds_ += seconds;
  range_allreduce_seconds_ += seconds;
  allreduce_steps_ += 1;
  const ClockTicks update_start = clock_ticks();
  host_span(wait_start, update_start, TimeCategory::communication_exposed);
  enqueue_part(slot, StepPart::update);
  host_span(update_start, clock_ticks(), TimeCategory::other);
  host_step_done();
}

// With graphs on, the first time a slot runs a part it runs eagerly (that loads every kernel
// and cuBLAS's own) and is then captured; later it is one graph launch (graph_runner.hpp).
void GpuStrategy::enqueue_part(int slot, StepPart part) {
  CudaApi api{compute_.get()};
  const auto key = static_cast<std::size_t>(slot) * step_parts + static_cast<std::size_t>(part);
  graphs_.run(api, key, [&] { enqueue_part_eagerly(slot, part); });
}

void GpuStrategy::enqueue_part_eagerly(int slot, StepPart part) {
  const StepLaunch& step = launch_[slot];
  const std::size_t grad_bytes = sizeof(float) * grads_.size();
  if (part != StepPart::update) enqueue_forward_backward(step, compute_.get(), blas_->get());
  // With several ranks the two copies are the communication groups before the update's.
  if (part == StepPart::forward_backward) {
    CNNBENCH_CUDA(cudaMemcpyAsync(grads_host_.data(), grads_.data(), grad_bytes,
                                  cudaMemcpyDeviceToHost, compute_.get()));
    enqueue_stamp(step, compute_.get(), stamps_plan_.gradients_to_host_slot);
  }
  if (part == StepPart::update) {
    CNNBENCH_CUDA(cudaMemcpyAsync(grads_.data(), grads_host_.data(), grad_bytes,
                                  cudaMemcpyHostToDevice, compute_.get()));
    enqueue_stamp(step, compute_.get(), stamps_plan_.gradients_back_slot);
  }
  if (part != StepPart::forward_backward) {
    enqueue_update(step, compute_.get(), stamps_plan_.update_slot);
  }
}

// compute_seconds leaves out the time the device waited for the ranks' gradient sum.
void GpuStrategy::account_timings(std::int64_t count) {
  if (mode_ == DataMode::resident) {
    copy_seconds_ += elapsed_seconds(copy_start_[0], copy_end_[0]);
    compute_seconds_ +=
        elapsed_seconds(compute_start_[0], compute_end_[0]) - range_allreduce_seconds_;
    return;
  }
  double copy = 0, compute = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    copy += elapsed_seconds(copy_start_[i], copy_end_[i]);
    compute += elapsed_seconds(compute_start_[i], compute_end_[i]);
  }
  copy_seconds_ += copy;
  compute_seconds_ += compute - range_allreduce_seconds_;
  // Copy time that ran under compute: the busy times add up to more than the wall span.
  const double span = elapsed_seconds(copy_start_[0], compute_end_[count - 1]);
  overlap_seconds_ += std::clamp(copy + compute - span, 0.0, copy);
}

}  // namespace cnnbench::gpu
