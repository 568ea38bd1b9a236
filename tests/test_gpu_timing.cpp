// The GPU strategy's timing, on the host (no GPU needed): the kernel groups a step is stamped by
// cover every kernel and mirror the serial model's layers, and a range's stamps replay into
// breakdown steps and spans whose times are the stamps' differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "../lib/strategies/gpu/device_timing.hpp"
#include "cnnbench/models.hpp"

namespace cnnbench::gpu {
namespace {

// The index of `name` in the model's timed layers (the serial strategy's names).
int layer(ModelKind kind, const std::string& name) {
  const auto& names = timed_layer_names(kind);
  const auto at = std::find(names.begin(), names.end(), name);
  EXPECT_NE(at, names.end()) << name;
  return static_cast<int>(at - names.begin());
}

std::vector<KernelGroup> expected_groups(ModelKind kind, const std::vector<std::string>& layers) {
  std::vector<KernelGroup> out = {{TimeCategory::data}};
  for (const std::string& name : layers) out.push_back({TimeCategory::compute, layer(kind, name)});
  return out;
}

TEST(GpuTiming, GroupsAreTheLayersForwardThenBackward) {
  EXPECT_EQ(forward_backward_groups(true),
            expected_groups(ModelKind::lenet5, {"c1", "c2", "f1", "f2", "f3", "loss", "f3", "f2",
                                                "f1", "c2", "c1"}));
  EXPECT_EQ(forward_backward_groups(false),
            expected_groups(ModelKind::fc3, {"f1", "f2", "f3", "loss", "f3", "f2", "f1"}));
  EXPECT_EQ(update_groups(), std::vector<KernelGroup>{{TimeCategory::update}});
}

// The stamps the strategy enqueues itself land on the groups they end: the gradients' copies on
// communication groups right after forward_backward's, the update on the update group, last.
TEST(GpuTiming, StampSlotsEndTheirGroups) {
  for (const bool lenet5 : {true, false}) {
    const auto forward_backward = static_cast<int>(forward_backward_groups(lenet5).size());
    const StepStampPlan one = plan_step_stamps(lenet5, false);
    EXPECT_EQ(one.per_step(), forward_backward + 2);
    EXPECT_EQ(one.update_slot, forward_backward + 1);
    EXPECT_EQ(one.gradients_to_host_slot, -1);
    EXPECT_EQ(one.groups.back(), KernelGroup{TimeCategory::update});

    const StepStampPlan ranks = plan_step_stamps(lenet5, true);
    EXPECT_EQ(ranks.per_step(), forward_backward + 4);
    EXPECT_EQ(ranks.gradients_to_host_slot, forward_backward + 1);
    EXPECT_EQ(ranks.gradients_back_slot, forward_backward + 2);
    EXPECT_EQ(ranks.update_slot, forward_backward + 3);
    // Slot k ends groups[k - 1].
    const auto group_at = [&](int slot) {
      return ranks.groups[static_cast<std::size_t>(slot - 1)];
    };
    EXPECT_EQ(group_at(ranks.gradients_to_host_slot).category, TimeCategory::communication_exposed);
    EXPECT_EQ(group_at(ranks.gradients_back_slot).category, TimeCategory::communication_exposed);
    EXPECT_EQ(group_at(ranks.update_slot).category, TimeCategory::update);
    EXPECT_EQ(ranks.update_slot, ranks.per_step() - 1) << "the update's stamp is the step's last";
  }
}

// Counts the kernels enqueued after the last group boundary: a kernel there would be timed as
// part of the next step's wait.
struct UngroupedKernels {
  int ungrouped = 0, groups = 0;
  template <class Body>
  void for_each(const char*, std::int64_t, Body) { ++ungrouped; }
  void gemm(const char*, const GemmCall&) { ++ungrouped; }
  void end_group(KernelGroup) {
    ++groups;
    ungrouped = 0;
  }
};

TEST(GpuTiming, EveryKernelOfAStepIsInAGroup) {
  for (const bool lenet5 : {true, false}) {
    UngroupedKernels exec;
    StepBuffers buffers;
    buffers.batch = 8;
    gather_batch_step(exec, BatchSource{}, buffers);
    if (lenet5) {
      lenet5_forward_backward(exec, Lenet5Tensors{}, Lenet5Tensors{}, buffers, 1.0f);
    } else {
      fc3_forward_backward(exec, Fc3Tensors{}, Fc3Tensors{}, buffers, 1.0f);
    }
    EXPECT_EQ(exec.ungrouped, 0) << (lenet5 ? "lenet5" : "fc3");
    sgd_update_step(exec, nullptr, nullptr, nullptr, 1, 0.1f, 0.9f, 0.0f);
    EXPECT_EQ(exec.ungrouped, 0) << "the update";
    EXPECT_EQ(static_cast<std::size_t>(exec.groups),
              forward_backward_groups(lenet5).size() + update_groups().size());
  }
}

// Two steps of [gather, f1, loss, comm, comm, update]: the stamps are chosen, the expected
// seconds are their differences.
TEST(GpuTiming, ReplayGivesTheStampsDifferences) {
  const std::vector<KernelGroup> groups = {{TimeCategory::data},
                                           {TimeCategory::compute, 0},
                                           {TimeCategory::compute, 3},
                                           {TimeCategory::communication_exposed},
                                           {TimeCategory::communication_exposed},
                                           {TimeCategory::update}};
  // ns: per step the start, then the end of each group (7 stamps).
  const std::vector<std::uint64_t> stamps = {
      1'000, 1'100, 1'400, 1'450, 1'500, 2'500, 2'600,   // step 0
      2'700, 2'750, 3'050, 3'100, 3'120, 3'220, 3'320};  // step 1
  const ClockTicks offset = 5'000'000;
  SpanRing ring(8, 32);  // 8 steps of up to 32 spans: every replayed step kept
  for (const bool streamed : {false, true}) {
    StepTimeline timeline;
    timeline.record_spans(&ring);
    replay_device_range(timeline, groups, {stamps, offset + 400, offset}, 2, streamed);
    ASSERT_EQ(timeline.steps().size(), 2u);
    const StepTimes& s0 = timeline.steps()[0];
    const StepTimes& s1 = timeline.steps()[1];
    // Step 0 from the range's start (400) to its last stamp; the wait before it was the upload.
    EXPECT_NEAR(s0.wall, 2.2e-6, 1e-12);
    EXPECT_NEAR(s0[TimeCategory::data], (600 + 100) * 1e-9, 1e-12);
    EXPECT_NEAR(s0.layer_seconds[0], 300e-9, 1e-12);
    EXPECT_NEAR(s0.layer_seconds[3], 50e-9, 1e-12);
    EXPECT_NEAR(s0[TimeCategory::compute], 350e-9, 1e-12);
    EXPECT_NEAR(s0[TimeCategory::communication_exposed], 1'050e-9, 1e-12);
    EXPECT_NEAR(s0[TimeCategory::update], 100e-9, 1e-12);
    EXPECT_NEAR(s0.arrival, (1'450 - 400) * 1e-9, 1e-12);
    // Step 1's wait (100 ns) was the host's, unless the batch was streamed.
    EXPECT_NEAR(s1.wall, 720e-9, 1e-12);
    EXPECT_NEAR(s1[streamed ? TimeCategory::data : TimeCategory::other],
                (streamed ? 100 + 50 : 100) * 1e-9, 1e-12);
    EXPECT_NEAR(s1.arrival, (3'100 - 2'600) * 1e-9, 1e-12);
    double sum = 0;
    for (const double seconds : s1.seconds) sum += seconds;
    EXPECT_NEAR(sum, s1.wall, 1e-12);
  }
  // The spans lie on the host's clock: the first compute span of the last replay is f1 of step 0.
  const std::vector<Span> spans = ring.spans();
  const auto f1 = std::find_if(spans.begin(), spans.end(), [](const Span& span) {
    return span.category == TimeCategory::compute && span.layer == 0;
  });
  ASSERT_NE(f1, spans.end());
  EXPECT_EQ(f1->start, offset + 1'100);
  EXPECT_EQ(f1->end, offset + 1'400);
}

}  // namespace
}  // namespace cnnbench::gpu
