// Where the device's time went: the GPU strategy stamps the device's global timer (ns) at the start
// of each step and at the end of each kernel group (training_step.hpp's end_group) into a per-range
// array, from inside the CUDA graph as well, and reads it back once per range. This file turns a
// range's stamps into the device stream's StepTimeline (the breakdown's steps and the trace's
// spans); it is host code, tested without a device (tests/test_gpu_timing.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cnnbench/step_timeline.hpp"
#include "training_step.hpp"

namespace cnnbench::gpu {

// An executor of training_step.hpp that enqueues nothing and keeps the kernel groups in order.
struct KernelGroupRecorder {
  std::vector<KernelGroup> groups;
  template <class Body>
  void for_each(const char* /*name*/, std::int64_t /*n*/, Body /*body*/) {}
  void gemm(const char* /*name*/, const GemmCall& /*call*/) {}
  void end_group(KernelGroup group) { groups.push_back(group); }
};

// The kernel groups of gather + forward + backward, in enqueue order (the bodies never run: the
// tensors may be null).
inline std::vector<KernelGroup> forward_backward_groups(bool lenet5) {
  KernelGroupRecorder recorder;
  StepBuffers buffers;
  buffers.batch = 1;
  gather_batch_step(recorder, BatchSource{}, buffers);
  if (lenet5) {
    lenet5_forward_backward(recorder, Lenet5Tensors{}, Lenet5Tensors{}, buffers, 1.0f);
  } else {
    fc3_forward_backward(recorder, Fc3Tensors{}, Fc3Tensors{}, buffers, 1.0f);
  }
  return recorder.groups;
}

// The kernel groups of the update.
inline std::vector<KernelGroup> update_groups() {
  KernelGroupRecorder recorder;
  sgd_update_step(recorder, nullptr, nullptr, nullptr, 0, 0.0f, 0.0f, 0.0f);
  return recorder.groups;
}

// Where a step's stamps go: slot 0 is the step's start, slot k + 1 the end of groups[k]. The
// groups are forward_backward's, with several ranks the gradients' copy to the host and their sum
// over the ranks, then their copy back (communication), then the update's.
struct StepStampPlan {
  std::vector<KernelGroup> groups;
  int gradients_to_host_slot = -1, gradients_back_slot = -1;  // several ranks only
  int update_slot = 0;
  int per_step() const { return static_cast<int>(groups.size()) + 1; }
};

inline StepStampPlan plan_step_stamps(bool lenet5, bool multi_rank) {
  StepStampPlan plan;
  plan.groups = forward_backward_groups(lenet5);
  if (multi_rank) {
    plan.groups.push_back({TimeCategory::communication_exposed});
    plan.gradients_to_host_slot = plan.per_step() - 1;
    plan.groups.push_back({TimeCategory::communication_exposed});
    plan.gradients_back_slot = plan.per_step() - 1;
  }
  const std::vector<KernelGroup> update = update_groups();
  plan.update_slot = plan.per_step();  // the update part's first stamp
  plan.groups.insert(plan.groups.end(), update.begin(), update.end());
  return plan;
}

// A range's stamps: step i's row is stamps[i * (groups + 1) ...]: the step's start, then the end
// of each group. Device nanoseconds become host ClockTicks by adding offset (the host clock at a
// moment the device also stamped); range_start is the host's clock when the range began.
struct DeviceRangeStamps {
  std::span<const std::uint64_t> stamps;
  ClockTicks range_start = 0;
  ClockTicks offset = 0;
};

// Replays a range of `steps` steps into timeline: step i spans from the previous step's last stamp
// (for step 0 the range's start on the host) to its own last one, so the steps cover the range
// without gaps. The time before a step's start stamp is `data` when the device waited for the
// step's batch copy (streamed data) or, before step 0, for the range's index gather and upload
// (and in the first range the buffers' allocation), else `other` (the device waited for the
// host). A step reaches its collective when its first communication group begins.
inline void replay_device_range(StepTimeline& timeline, std::span<const KernelGroup> groups,
                                const DeviceRangeStamps& range, std::int64_t steps,
                                bool streamed_data) {
  const std::size_t per_step = groups.size() + 1;
  auto host = [&](std::uint64_t device_ns) {
    return static_cast<ClockTicks>(device_ns) + range.offset;
  };
  ClockTicks previous_end = range.range_start;
  for (std::int64_t i = 0; i < steps; ++i) {
    const std::uint64_t* row = range.stamps.data() + static_cast<std::size_t>(i) * per_step;
    timeline.begin_step(previous_end);
    const bool waited_for_data = streamed_data || i == 0;
    timeline.close(waited_for_data ? TimeCategory::data : TimeCategory::other, host(row[0]));
    bool arrived = false;
    for (std::size_t k = 0; k < groups.size(); ++k) {
      const KernelGroup group = groups[k];
      if (group.category == TimeCategory::communication_exposed && !arrived) {
        timeline.mark_arrival(timeline.cursor());
        arrived = true;
      }
      if (group.category == TimeCategory::compute && group.layer >= 0) {
        timeline.close_layer(group.layer, host(row[k + 1]));
      } else {
        timeline.close(group.category, host(row[k + 1]));
      }
    }
    previous_end = host(row[per_step - 1]);
    timeline.end_step(previous_end);
  }
}

}  // namespace cnnbench::gpu
