// The stream strategy on more cores than the machine has: strict mode equals serial mini-batch
// SGD (the loss curve, then one step from the same state: equivalence.hpp) on P = 1..16 (oversubscribed threads, default widths, the paper's graph spread
// over the cores, and split layers inside copies of the net), and the graph builder, schedule and
// partition hold their rules up to P = 64 without training.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "../lib/strategies/stream/training_graph.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/stream.hpp"
#include "cnnbench/train.hpp"
#include "equivalence.hpp"
#include "thread_counts.hpp"

namespace cnnbench {
namespace {

constexpr int batch = 16;  // >= 16 cores' copies of the net: one sample each
constexpr std::int64_t steps = 4;

const Dataset& data() {
  static const Dataset d = make_synthetic(batch * steps, 5);
  return d;
}

std::vector<std::uint32_t> order() { return epoch_order(data().count, 9, 0, true); }

Model initial(ModelKind kind) {
  Model model(kind);
  init_params(model.params, kind, 13);
  return model;
}

struct Trained {
  Model model;
  std::vector<double> losses;
};

Trained serial_reference(ModelKind kind) {
  set_blas_threads(1);
  Trained out{initial(kind), {}};
  Workspace workspace(kind, batch);
  const auto samples = order();
  std::vector<float> x(std::size_t(batch) * data().image_size());
  std::vector<std::uint8_t> y(batch);
  for (std::int64_t s = 0; s < steps; ++s) {
    gather_batch(x.data(), y.data(), data(), samples.data() + s * batch, batch);
    std::fill(out.model.grads.begin(), out.model.grads.end(), 0.0f);
    out.losses.push_back(forward_backward(kind, out.model.params.data(), out.model.grads.data(),
                                          x.data(), y.data(), batch, 1.0f / batch, workspace) /
                         batch);
    sgd_step(out.model.params.data(), out.model.grads.data(), out.model.momentum.data(),
             out.model.params.size(), SgdConfig{});
  }
  return out;
}

const Trained& serial(ModelKind kind) {
  static const Trained fc3 = serial_reference(ModelKind::fc3);
  static const Trained lenet5 = serial_reference(ModelKind::lenet5);
  return kind == ModelKind::fc3 ? fc3 : lenet5;
}

// The strategy of `config` from `start`: `count` steps from the order's step `first`.
Trained train_stream(const TrainConfig& config, const Model& start, std::int64_t first,
                     std::int64_t count) {
  auto strategy = make_strategy("stream");
  Trained got{start, {}};
  strategy->prepare(got.model, data(), config);
  const auto samples = order();
  strategy->run_steps({samples.data(), first, count, first},
                      [&](std::int64_t, double loss) { got.losses.push_back(loss); });
  strategy->sync_to(got.model);
  EXPECT_EQ(strategy->metrics()["cores"], config.threads);
  return got;
}

void expect_strict_matches_serial(ModelKind kind, int cores, const std::string& widths) {
  if (!testing::runs_here(cores)) {
    std::printf("left out under ThreadSanitizer: %d cores, --widths %s (testing::runs_here)\n",
                cores, widths.c_str());
    return;
  }
  TrainConfig config;
  config.model = kind;
  config.strategy = "stream";
  config.batch = batch;
  config.threads = cores;
  config.pin = true;  // more cores than the machine has wrap around its cores
  config.options["consistency"] = "strict";
  if (!widths.empty()) config.options["widths"] = widths;
  const std::string what = std::string(model_name(kind)) + " on " + std::to_string(cores) +
                           " cores, --widths " + (widths.empty() ? "(default)" : widths);
  const Trained got = train_stream(config, initial(kind), 0, steps);
  testing::expect_loss_curves_close(got.losses, serial(kind).losses, what);
  // One more step from the stream's state, on the order's first batch again.
  const testing::ModelState reached = testing::state_of(got.model);
  const Trained stepped = train_stream(config, testing::model_from(kind, reached), 0, 1);
  testing::expect_one_step_close(testing::state_of(stepped.model),
                                 testing::serial_step_from(kind, reached, data(), order().data(), batch),
                                 kind, what);
}

class StreamOnManyCores : public ::testing::TestWithParam<int> {};

TEST_P(StreamOnManyCores, StrictEqualsSerialWithDefaultWidthsAndThePapersGraph) {
  const int cores = GetParam();
  for (const ModelKind kind : {ModelKind::fc3, ModelKind::lenet5}) {
    expect_strict_matches_serial(kind, cores, "");
  }
  // The paper's graph of LeNet-5 (no copies), its splitjoins spread over the cores.
  expect_strict_matches_serial(ModelKind::lenet5, cores, "s=1");
}

INSTANTIATE_TEST_SUITE_P(Cores, StreamOnManyCores, ::testing::ValuesIn(testing::counts_up_to(16)));

// Split layers inside copies, uneven widths, and as many copies as cores.
TEST(StreamOnManyCores, FissionAndSplitLayersTogether) {
  expect_strict_matches_serial(ModelKind::lenet5, 8, "s=2,c1k=2,c2c=2,f1=2");
  expect_strict_matches_serial(ModelKind::lenet5, 16, "s=4,c1k=2,c2c=3,f1=3,f2=2");
  expect_strict_matches_serial(ModelKind::fc3, 12, "s=2,f1=6,f2=3,f3=1");
  expect_strict_matches_serial(ModelKind::fc3, 16, "s=16");
}

// Without training: the graph of every core count up to 64 builds, balances and partitions
// with every actor on one of the P cores and every stage after its producers'.
TEST(StreamGraphUpTo64Cores, BuildsSchedulesAndPartitions) {
  for (const ModelKind kind : {ModelKind::fc3, ModelKind::lenet5}) {
    for (const int cores : testing::counts_up_to(64)) {
      for (const std::string spec : {"", "s=1"}) {
        TrainingPlan plan;
        plan.data = &data();
        plan.model = kind;
        plan.batch = 64;
        plan.microbatches = 1;
        plan.micro_batch = 64;
        plan.window = 1;
        plan.cores = cores;
        const LayerWidths widths = choose_widths(spec, kind, cores, Consistency::strict, 64);
        FlowTable flow;
        TrainingGraph built = build_training_graph(plan, flow, widths);
        const stream::Graph graph = stream::flatten(built.root, built.links);
        const stream::Schedule schedule = stream::make_schedule(graph);
        const std::string what = std::string(model_name(kind)) + " on " +
                                 std::to_string(cores) + " cores, --widths " + spec;
        ASSERT_EQ(schedule.steady.size(), graph.actors.size()) << what;
        for (const std::int64_t firings : schedule.steady) EXPECT_GE(firings, 1) << what;
        const stream::Partition partition = stream::partition_graph(graph, schedule, cores);
        ASSERT_EQ(partition.core_of.size(), graph.actors.size()) << what;
        for (const int core : partition.core_of) {
          EXPECT_GE(core, 0) << what;
          EXPECT_LT(core, cores) << what;
        }
        for (const stream::Edge& edge : graph.edges) {
          if (edge.feedback) continue;
          const auto from = static_cast<std::size_t>(edge.from), to = static_cast<std::size_t>(edge.to);
          const int expected = partition.stage_of[from] +
                               (partition.core_of[from] != partition.core_of[to] ? 1 : 0);
          EXPECT_GE(partition.stage_of[to], expected) << what << ": " << graph.edge_name(edge);
        }
        EXPECT_LE(partition.predicted_speedup, cores + 1e-9) << what;
        EXPECT_LE(widths.sample_groups, cores) << what;
        EXPECT_EQ(64 % widths.sample_groups, 0) << what;
      }
    }
  }
}

}  // namespace
}  // namespace cnnbench
