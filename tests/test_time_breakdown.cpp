// Where a step's time goes: the step timeline's bookkeeping and the critical path on made-up
// times (exact), then the breakdown every strategy reports (serial, blas, stream in each
// consistency mode, cluster at 1x1, 1x2 and 2x1 on simulated ranks): the categories add up to
// the steps' wall time and the unexplained rest stays small. The sums are exact by design
// (every phase closes where the previous one ended), so a loaded machine does not move them.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "../lib/strategies/cluster/cluster_strategy.hpp"
#include "cnnbench/config.hpp"
#include "cnnbench/data.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/time_breakdown.hpp"
#include "cnnbench/train.hpp"
#include "simulated_ranks.hpp"

namespace cnnbench {
namespace {

constexpr ClockTicks ms = 1'000'000;

TEST(StepTimeline, PhasesAddUpToTheStepAndTheRestIsOther) {
  StepTimeline timeline;
  timeline.reserve_steps(2);
  timeline.begin_step(0);
  timeline.close(TimeCategory::data, 1 * ms);
  timeline.close_layer(0, 4 * ms);
  timeline.close_layer(1, 6 * ms);
  timeline.close(TimeCategory::update, 7 * ms);
  timeline.end_step(8 * ms);
  ASSERT_EQ(timeline.steps().size(), 1u);
  const StepTimes& step = timeline.steps()[0];
  EXPECT_DOUBLE_EQ(step.wall, 8e-3);
  EXPECT_DOUBLE_EQ(step[TimeCategory::data], 1e-3);
  EXPECT_DOUBLE_EQ(step[TimeCategory::compute], 5e-3);
  EXPECT_DOUBLE_EQ(step.layer_seconds[0], 3e-3);
  EXPECT_DOUBLE_EQ(step.layer_seconds[1], 2e-3);
  EXPECT_DOUBLE_EQ(step[TimeCategory::update], 1e-3);
  EXPECT_DOUBLE_EQ(step[TimeCategory::other], 1e-3);
  timeline.clear_steps();
  EXPECT_TRUE(timeline.steps().empty());
}

TEST(StepTimeline, SpansGoToTheRingOnlyWhenOneIsGiven) {
  StepTimeline timeline;
  timeline.reserve_steps(4);
  SpanRing ring(1, 3);
  timeline.begin_step(0);
  timeline.close(TimeCategory::data, 1 * ms);
  timeline.record_spans(&ring);
  for (int i = 2; i <= 5; ++i) timeline.close_layer(i - 2, i * ms);
  timeline.record_spans(nullptr);
  timeline.end_step(6 * ms);
  const std::vector<Span> spans = ring.spans();  // the last 3 of 4, oldest first
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[0].start, 2 * ms);
  EXPECT_EQ(spans[0].layer, 1);
  EXPECT_EQ(spans[2].end, 5 * ms);
  EXPECT_EQ(spans[2].category, TimeCategory::compute);
}

StepTimes worker_step(double compute, double wait) {
  StepTimes step;
  step[TimeCategory::compute] = compute;
  step[TimeCategory::imbalance_wait] = wait;
  step.wall = compute + wait;
  return step;
}

TEST(BreakdownBuilder, TakesTheBusiestWorkerOfEachStepAndNamesTheStraggler) {
  BreakdownBuilder builder({{"thread", 0}, {"thread", 1}, {"thread", 2}}, "thread", {0, 1, 2});
  // Thread 2 computes twice as long as the others, who wait for it.
  for (int k = 0; k < 4; ++k) {
    const std::vector<StepTimes> step = {worker_step(1, 1), worker_step(1, 1), worker_step(2, 0)};
    builder.add_step(step);
  }
  const TimeBreakdown b = builder.result({"f1"});
  EXPECT_EQ(b.steps, 4);
  EXPECT_DOUBLE_EQ(b.critical_path[TimeCategory::compute], 8.0);
  EXPECT_DOUBLE_EQ(b.critical_path[TimeCategory::imbalance_wait], 0.0);
  ASSERT_EQ(b.workers.size(), 3u);
  EXPECT_DOUBLE_EQ(b.workers[0].total[TimeCategory::imbalance_wait], 4.0);
  EXPECT_EQ(b.straggler.kind, "thread");
  EXPECT_EQ(b.straggler.id, 2);
  EXPECT_DOUBLE_EQ(b.straggler.mean_excess, 2.0);
}

TEST(BreakdownBuilder, ARankIsItsBusiestThreadAndOneWorkerHasNoExcess) {
  BreakdownBuilder ranks({{"thread", 0, 0}, {"thread", 1, 0}, {"thread", 0, 1}, {"thread", 1, 1}},
                         "rank", {0, 0, 1, 1});
  const std::vector<StepTimes> step = {worker_step(1, 2), worker_step(3, 0), worker_step(1, 0),
                                       worker_step(1.5, 0)};
  ranks.add_step(step);
  const TimeBreakdown b = ranks.result({});
  EXPECT_EQ(b.straggler.kind, "rank");
  EXPECT_EQ(b.straggler.id, 0);
  EXPECT_DOUBLE_EQ(b.straggler.mean_excess, 2.0);  // 3 against rank 1's 1.5

  BreakdownBuilder alone({{"thread", 0}}, "thread", {0});
  alone.add_step(std::vector<StepTimes>{worker_step(1, 0)});
  EXPECT_DOUBLE_EQ(alone.result({}).straggler.mean_excess, 1.0);
}

TEST(BreakdownBuilder, ARankThatArrivedEarlyWaitedForTheLastNotForTheNetwork) {
  std::vector<std::vector<StepTimes>> by_rank(2, std::vector<StepTimes>(1));
  by_rank[0][0].arrival = 1.0;
  by_rank[0][0][TimeCategory::communication_exposed] = 1.5;
  by_rank[1][0].arrival = 2.0;
  by_rank[1][0][TimeCategory::communication_exposed] = 0.5;
  separate_rank_imbalance(by_rank);
  EXPECT_DOUBLE_EQ(by_rank[0][0][TimeCategory::imbalance_wait], 1.0);
  EXPECT_DOUBLE_EQ(by_rank[0][0][TimeCategory::communication_exposed], 0.5);
  EXPECT_DOUBLE_EQ(by_rank[1][0][TimeCategory::imbalance_wait], 0.0);
  EXPECT_DOUBLE_EQ(by_rank[1][0][TimeCategory::communication_exposed], 0.5);
}

// ---- every strategy's breakdown adds up ---------------------------------------------------------

double category_sum(const StepTimes& times) {
  return std::accumulate(times.seconds.begin(), times.seconds.end(), 0.0);
}

// The rules every breakdown keeps: its categories add up to its wall time (within 5%; by
// construction, up to rounding), other_s stays under 10% of it, the layers' times are part of
// compute, and so for every worker; the report carries it with the categories the schema names.
void expect_breakdown_adds_up(const TimeBreakdown& b, std::int64_t steps, std::size_t workers,
                              const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(b.measured());
  EXPECT_EQ(b.steps, steps);
  const StepTimes& path = b.critical_path;
  ASSERT_GT(path.wall, 0.0);
  EXPECT_NEAR(category_sum(path), path.wall, 0.05 * path.wall);
  EXPECT_LT(path[TimeCategory::other], 0.10 * path.wall);
  EXPECT_GT(path[TimeCategory::compute], 0.0);
  const double layers = std::accumulate(path.layer_seconds.begin(), path.layer_seconds.end(), 0.0);
  EXPECT_LE(layers, path[TimeCategory::compute] * (1 + 1e-9));
  EXPECT_GT(layers, 0.0);
  ASSERT_EQ(b.workers.size(), workers);
  for (const WorkerBreakdown& worker : b.workers) {
    EXPECT_NEAR(category_sum(worker.total), worker.total.wall, 0.05 * worker.total.wall)
        << worker.worker.kind << " " << worker.worker.id;
    EXPECT_LT(worker.total[TimeCategory::other], 0.10 * worker.total.wall)
        << worker.worker.kind << " " << worker.worker.id;
  }
  const nlohmann::json json = time_breakdown_json(b);
  double sum = 0;
  for (const char* key : {"compute_s", "update_s", "reduce_s", "communication_exposed_s",
                          "imbalance_wait_s", "pipeline_bubble_s", "data_s", "other_s"}) {
    ASSERT_TRUE(json.contains(key)) << key;
    sum += json[key].get<double>();
  }
  EXPECT_NEAR(sum, json["wall_s"].get<double>(), 0.05 * json["wall_s"].get<double>());
  EXPECT_EQ(json["workers"].size(), workers);
  EXPECT_EQ(json["per_layer"].size(), b.layer_names.size());
}

TrainConfig short_run(const std::string& strategy, int threads,
                      std::map<std::string, std::string> options = {}) {
  TrainConfig c;
  c.model = ModelKind::lenet5;
  c.strategy = strategy;
  c.batch = 32;
  c.steps = 24;
  c.threads = threads;
  c.pin = false;  // tests share the machine's cores
  c.options = std::move(options);
  return c;
}

TimeBreakdown train_and_break_down(const TrainConfig& config) {
  const Dataset data = make_synthetic(512, 3);
  return run_training(config, data, RunOptions{}).time_breakdown;
}

TEST(TimeBreakdown, SerialAndBlasAddUp) {
  for (const std::string strategy : {"serial", "blas"}) {
    const TimeBreakdown b = train_and_break_down(short_run(strategy, 1));
    expect_breakdown_adds_up(b, 24, 1, strategy);
    EXPECT_EQ(b.layer_names, (std::vector<std::string>{"c1", "c2", "f1", "f2", "f3", "loss"}));
    EXPECT_GT(b.critical_path[TimeCategory::update], 0.0);
    EXPECT_GT(b.critical_path[TimeCategory::data], 0.0);
  }
}

TEST(TimeBreakdown, StreamAddsUpInEveryConsistencyMode) {
  for (const std::string mode : {"strict", "group-async", "async"}) {
    std::map<std::string, std::string> options = {{"consistency", mode}};
    if (mode == "async") options["widths"] = "s=1";  // async takes the pipeline, not copies
    const TimeBreakdown b = train_and_break_down(short_run("stream", 2, options));
    expect_breakdown_adds_up(b, 24, 2, "stream " + mode);
    for (const WorkerBreakdown& worker : b.workers) EXPECT_EQ(worker.worker.kind, "stage");
  }
  // The pipeline of the paper's graph idles while it fills and drains.
  const TimeBreakdown pipeline =
      train_and_break_down(short_run("stream", 2, {{"widths", "s=1"}, {"microbatches", "2"}}));
  double bubble = 0;
  for (const WorkerBreakdown& worker : pipeline.workers) {
    bubble += worker.total[TimeCategory::fill_drain] + worker.total[TimeCategory::starvation];
  }
  EXPECT_GT(bubble, 0.0);
}

TEST(TimeBreakdown, ClusterOnOneRankAddsUp) {
  // The registry's cluster strategy runs on MPI's world; the simulated ranks below need no MPI.
  if (!CNNBENCH_HAVE_MPI) GTEST_SKIP() << "built without MPI: no cluster strategy in the registry";
  expect_breakdown_adds_up(train_and_break_down(short_run("cluster", 1)), 24, 1, "cluster 1x1");
  const TimeBreakdown b = train_and_break_down(short_run("cluster", 2));
  expect_breakdown_adds_up(b, 24, 2, "cluster 1x2");
  EXPECT_EQ(b.straggler.kind, "thread");
}

TEST(TimeBreakdown, ClusterOnTwoSimulatedRanksAddsUpTheSameOnEveryRank) {
  const Dataset data = make_synthetic(1024, 3);  // 32 steps: one epoch's order holds them all
  const std::vector<std::uint32_t> order = epoch_order(data.count, 3, 0, true);
  const TrainConfig config = short_run("cluster", 1, {{"overlap", "off"}});
  testing::SimulatedJob job(2);
  std::vector<TimeBreakdown> breakdowns(2);
  testing::run_simulated_ranks(job, [&](int rank, std::unique_ptr<testing::SimulatedRank> group) {
    Model model(config.model);
    init_params(model.params, config.model, 1);
    auto strategy = make_cluster_strategy(std::move(group));
    strategy->prepare(model, data, config);
    const StepCallback ignore = [](std::int64_t, double) {};
    strategy->run_steps({order.data(), 0, 10, 0}, ignore);
    strategy->run_steps({order.data(), 10, 14, 10}, ignore);
    breakdowns[static_cast<std::size_t>(rank)] = strategy->time_breakdown();
  });
  expect_breakdown_adds_up(breakdowns[0], 24, 2, "cluster 2x1");
  EXPECT_EQ(breakdowns[0].straggler.kind, "rank");
  EXPECT_EQ(breakdowns[0].workers[1].worker.kind, "rank");
  EXPECT_EQ(breakdowns[0].workers[1].worker.id, 1);
  // Every rank gathered every rank's steps: the same figures on each.
  EXPECT_EQ(breakdowns[1].critical_path.wall, breakdowns[0].critical_path.wall);
  EXPECT_EQ(breakdowns[1].straggler.id, breakdowns[0].straggler.id);
}

// The injected slowdown makes its copy the straggler. Its factor is not asserted tightly: the
// copies' times are wall times on a machine other tests share.
TEST(TimeBreakdown, StreamNamesTheSlowedCopy) {
  TrainConfig config = short_run("stream", 2, {{"slowdown", "1:2"}, {"widths", "s=2"}});
  config.batch = 128;
  const TimeBreakdown b = train_and_break_down(config);
  EXPECT_EQ(b.straggler.kind, "copy");
  EXPECT_EQ(b.straggler.id, 1);
  EXPECT_GT(b.straggler.mean_excess, 1.2);
  EXPECT_EQ(straggler_line(b).rfind("straggler: copy 1 was ", 0), 0u) << straggler_line(b);
}

}  // namespace
}  // namespace cnnbench
