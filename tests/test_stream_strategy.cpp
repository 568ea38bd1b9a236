// The stream strategy against serial: strict mode equals mini-batch SGD (forward_backward +
// sgd_step) for FC-3 and LeNet-5 on 1-4 cores, in the paper's graph (s=1) and with sample fission
// (s=2: two copies of the net whose gradients are summed): the loss curve of 50 steps, then one
// step from the same weights and momentum (equivalence.hpp); group-async equals its
// one-step-stale oracle in both; async trains; options fail with the flag's name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "../lib/strategies/stream/training_graph.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/train.hpp"
#include "equivalence.hpp"
#include "error_message.hpp"
#include "temp_dir.hpp"

namespace cnnbench {
namespace {

constexpr int batch = 16;
constexpr std::int64_t steps = 50;

struct Trained {
  Model model;
  std::vector<double> losses;
};

const Dataset& data() {
  static const Dataset d = make_synthetic(batch * steps, 7);
  return d;
}

std::vector<std::uint32_t> order() { return epoch_order(data().count, 3, 0, true); }

SgdConfig sgd() { return {0.05f, 0.9f, 1e-4f}; }

Model initial(ModelKind kind) {
  Model model(kind);
  init_params(model.params, kind, 11);
  return model;
}

// Serial mini-batch SGD; with `stale`, group g's gradient is taken at the weights before the
// previous update (W_{g-1}, W_{-1} = W_0) as group-async defines it.
Trained serial_reference(ModelKind kind, bool stale) {
  set_blas_threads(1);  // as every strategy runs it
  Trained out{initial(kind), {}};
  Workspace ws(kind, batch);
  const auto idx = order();
  std::vector<float> x(std::size_t(batch) * 784);
  std::vector<std::uint8_t> y(batch);
  aligned_vector<float> previous = out.model.params;
  for (std::int64_t s = 0; s < steps; ++s) {
    gather_batch(x.data(), y.data(), data(), idx.data() + s * batch, batch);
    std::fill(out.model.grads.begin(), out.model.grads.end(), 0.0f);
    const float* at = stale ? previous.data() : out.model.params.data();
    out.losses.push_back(forward_backward(kind, at, out.model.grads.data(), x.data(), y.data(),
                                          batch, 1.0f / batch, ws) /
                         batch);
    previous = out.model.params;
    sgd_step(out.model.params.data(), out.model.grads.data(), out.model.momentum.data(),
             out.model.params.size(), sgd());
  }
  return out;
}

TrainConfig config_for(ModelKind kind, int cores, const std::string& consistency, int m) {
  TrainConfig config;
  config.model = kind;
  config.strategy = "stream";
  config.batch = batch;
  config.sgd = sgd();
  config.threads = cores;
  config.pin = false;  // 3 and 4 threads share this machine's cores
  config.options["consistency"] = consistency;
  config.options["microbatches"] = std::to_string(m);
  return config;
}

Trained run_stream(const TrainConfig& config, nlohmann::json* metrics = nullptr) {
  auto strategy = make_strategy("stream");
  Trained out{initial(config.model), {}};
  strategy->prepare(out.model, data(), config);
  const auto idx = order();
  // Two ranges: the pipeline drains between them as it must for checkpoints.
  for (const auto& [first, count] : {std::pair<std::int64_t, std::int64_t>{0, 20}, {20, 30}}) {
    std::int64_t expected = 0;
    strategy->run_steps({idx.data(), first, count, first}, [&](std::int64_t i, double loss) {
      EXPECT_EQ(i, expected++);
      out.losses.push_back(loss);
    });
    EXPECT_EQ(expected, count);
  }
  strategy->sync_to(out.model);
  if (metrics) *metrics = strategy->metrics();
  return out;
}

// One step from `from` on a fresh strategy, as `--resume` starts one: the first batch of the
// order, as the step after the run's last.
testing::ModelState stream_step_from(const TrainConfig& config, const testing::ModelState& from) {
  auto strategy = make_strategy("stream");
  Model model = testing::model_from(config.model, from);
  strategy->prepare(model, data(), config);
  const auto idx = order();
  strategy->run_steps({idx.data(), 0, 1, steps}, [](std::int64_t, double) {});
  strategy->sync_to(model);
  return testing::state_of(model);
}

// The run's loss curve equals the reference's, and one more step from the run's weights and
// momentum equals serial's step from there (equivalence.hpp).
void expect_equivalent(const Trained& got, const Trained& want, const TrainConfig& config,
                       const std::string& what) {
  testing::expect_loss_curves_close(got.losses, want.losses, what);
  const testing::ModelState reached = testing::state_of(got.model);
  const auto idx = order();
  testing::expect_one_step_close(
      stream_step_from(config, reached),
      testing::serial_step_from(config.model, reached, data(), idx.data(), batch, sgd()),
      config.model, what);
}

class StrictEqualsSerial
    : public ::testing::TestWithParam<std::tuple<ModelKind, int, const char*>> {};

TEST_P(StrictEqualsSerial, WeightsAndLossesMatchAfter50Steps) {
  const auto [kind, cores, widths] = GetParam();
  static const Trained fc3 = serial_reference(ModelKind::fc3, false);
  static const Trained lenet5 = serial_reference(ModelKind::lenet5, false);
  const Trained& want = kind == ModelKind::fc3 ? fc3 : lenet5;
  const std::string what = std::string(model_name(kind)) + " on " + std::to_string(cores) +
                           " cores, --widths " + widths;
  TrainConfig config = config_for(kind, cores, "strict", 4);
  config.options["widths"] = widths;
  nlohmann::json metrics;
  const Trained got = run_stream(config, &metrics);
  expect_equivalent(got, want, config, what);
  EXPECT_EQ(metrics["staleness_histogram"].size(), 1u) << "strict never uses stale weights";
  EXPECT_EQ(metrics["cores"], cores);
  EXPECT_EQ(metrics["widths"]["sample_groups"], widths[2] - '0');
}

INSTANTIATE_TEST_SUITE_P(ModelsAndCores, StrictEqualsSerial,
                         ::testing::Combine(::testing::Values(ModelKind::fc3, ModelKind::lenet5),
                                            ::testing::Values(1, 2, 3, 4),
                                            ::testing::Values("s=1", "s=2")));

// Two copies of the net update each block from the last copy's thread while the other copy may
// already run the next group on the other weight buffer.
TEST(StreamStrategy, GroupAsyncEqualsTheOneStepStaleOracle) {
  for (ModelKind kind : {ModelKind::fc3, ModelKind::lenet5}) {
    const Trained want = serial_reference(kind, true);
    for (const char* widths : {"s=1", "s=2"}) {
      const std::string what = std::string(model_name(kind)) + " group-async " + widths;
      TrainConfig config = config_for(kind, 2, "group-async", 2);
      config.options["widths"] = widths;
      nlohmann::json metrics;
      const Trained got = run_stream(config, &metrics);
      expect_equivalent(got, want, config, what);
      EXPECT_EQ(metrics["consistency"], "group-async");
      EXPECT_GT(metrics["staleness_histogram"].value("1", 0), 0) << what;
      EXPECT_EQ(metrics["staleness_histogram"].size(), 2u) << what;
    }
  }
}

// LeNet-5 defaults to one copy per core in strict and group-async (as many as divide the
// micro-batch), with each copy's layers whole; async and FC-3 keep the paper's graph.
TEST(StreamStrategy, DefaultWidthsChooseFissionForLeNet5) {
  const auto widths_of = [](ModelKind kind, int cores, const char* mode, int m) {
    auto strategy = make_strategy("stream");
    strategy->prepare(initial(kind), data(), config_for(kind, cores, mode, m));
    return strategy->metrics()["widths"];
  };
  const nlohmann::json two = widths_of(ModelKind::lenet5, 2, "strict", 4);
  EXPECT_EQ(two["sample_groups"], 2);
  EXPECT_EQ(two["c1_kernel_groups"], 1);
  EXPECT_EQ(widths_of(ModelKind::lenet5, 3, "strict", 4)["sample_groups"], 2)
      << "3 copies do not divide a micro-batch of 4";
  EXPECT_EQ(widths_of(ModelKind::lenet5, 2, "group-async", 2)["sample_groups"], 2);
  const nlohmann::json async = widths_of(ModelKind::lenet5, 2, "async", 4);
  EXPECT_EQ(async["sample_groups"], 1);
  EXPECT_EQ(async["c1_kernel_groups"], 2);
  EXPECT_EQ(widths_of(ModelKind::fc3, 2, "strict", 4)["sample_groups"], 1);
  // strict's default group: one micro-batch for copies (nothing to pipeline), two otherwise.
  const auto default_microbatches = [](ModelKind kind, const char* widths) {
    TrainConfig config = config_for(kind, 2, "strict", 1);
    config.options.erase("microbatches");
    if (*widths) config.options["widths"] = widths;
    auto strategy = make_strategy("stream");
    strategy->prepare(initial(kind), data(), config);
    return strategy->metrics()["microbatches"].get<int>();
  };
  EXPECT_EQ(default_microbatches(ModelKind::lenet5, ""), 1);
  EXPECT_EQ(default_microbatches(ModelKind::lenet5, "s=1"), 2);
  EXPECT_EQ(default_microbatches(ModelKind::fc3, ""), 2);
}

TEST(StreamStrategy, AsyncTrainsAndReportsStaleness) {
  nlohmann::json metrics;
  const Trained got = run_stream(config_for(ModelKind::fc3, 2, "async", 4), &metrics);
  ASSERT_EQ(got.losses.size(), static_cast<std::size_t>(steps));
  for (double loss : got.losses) ASSERT_TRUE(std::isfinite(loss));
  double first = 0, last = 0;
  for (int s = 0; s < 10; ++s) {
    first += got.losses[s];
    last += got.losses[steps - 1 - s];
  }
  EXPECT_LT(last, first) << "async should still learn";
  std::int64_t counted = 0;
  for (const auto& [staleness, count] : metrics["staleness_histogram"].items()) {
    counted += count.get<std::int64_t>();
  }
  EXPECT_EQ(counted, metrics["graph_size"]["param_blocks"].get<std::int64_t>() * steps * 4);
  EXPECT_EQ(metrics["actor_core_map"].size(), metrics["graph_size"]["actors"].get<std::size_t>());
  EXPECT_GE(metrics["bubble_fraction"].get<double>(), 0.0);
  EXPECT_EQ(metrics["busy_seconds_per_core"].size(), 2u);
}

TEST(StreamStrategy, BadOptionsNameTheFlag) {
  auto message = [](const TrainConfig& config) {
    return test::error_of(
        [&] { make_strategy("stream")->prepare(initial(config.model), data(), config); });
  };
  EXPECT_NE(message(config_for(ModelKind::fc3, 2, "strict", 3)).find("--microbatches"),
            std::string::npos);
  EXPECT_NE(message(config_for(ModelKind::fc3, 2, "eventual", 4)).find("--consistency"),
            std::string::npos);
  // One option set on an otherwise valid 2-core strict (or async) run, and the text its error
  // must contain.
  struct BadOption {
    ModelKind model;
    const char* consistency;
    const char* key;
    const char* value;
    const char* expected;
  };
  std::vector<BadOption> cases = {
      {ModelKind::fc3, "strict", "widths", "c1k=2", "has no layer 'c1k'"},
      {ModelKind::lenet5, "strict", "widths", "s=3", "--widths s=3: must divide the micro-batch of 4"},
      {ModelKind::lenet5, "strict", "balance", "even", "--balance: unknown mode 'even'"},
      {ModelKind::lenet5, "strict", "slowdown", "2:2", "there is no copy 2 in a net of 2 copies"},
      {ModelKind::lenet5, "strict", "slowdown", "0:0.5", "--slowdown 0:0.5"},
      {ModelKind::lenet5, "async", "widths", "s=2", "--consistency async"},
  };
  // --widths on LeNet-5 that name no layer, give no width or one out of range, or are malformed.
  for (const char* widths : {"c9=2", "c1k", "c1k=0", "c1k=7", "f1=x", "f1=2,,f2=2"}) {
    cases.push_back({ModelKind::lenet5, "strict", "widths", widths, "--widths"});
  }
  for (const BadOption& bad : cases) {
    TrainConfig config = config_for(bad.model, 2, bad.consistency, 4);
    config.options[bad.key] = bad.value;
    EXPECT_NE(message(config).find(bad.expected), std::string::npos)
        << "--" << bad.key << " " << bad.value;
  }
}

// Any splitjoin widths compute the same thing: uneven blocks, im2col conv blocks (c2 split by
// kernels), and every dense layer split, on 3 cores; and split blocks inside 4 copies of the net.
TEST(StreamStrategy, StrictWithOtherWidthsEqualsSerial) {
  const Trained want = serial_reference(ModelKind::lenet5, false);
  for (const char* widths : {"s=1,c1k=4,c2k=3,c2c=2,f1=3,f2=2,f3=3", "s=4,c1k=2,c2c=2,f1=2"}) {
    TrainConfig config = config_for(ModelKind::lenet5, 3, "strict", 4);
    config.options["widths"] = widths;
    if (widths[2] == '4') config.options["microbatches"] = "2";
    nlohmann::json metrics;
    const Trained got = run_stream(config, &metrics);
    expect_equivalent(got, want, config, std::string("lenet5 with widths ") + widths);
    EXPECT_EQ(metrics["widths"]["c2_kernel_groups"], widths[2] == '1' ? 3 : 1);
    EXPECT_EQ(metrics["widths"]["sample_groups"], widths[2] - '0');
  }
}

// --balance dynamic re-sizes the copies' shares of each micro-batch; any shares sum the same
// gradients, so strict still equals serial. Copy 0 is slowed 3x so that the shares must move.
TEST(StreamStrategy, DynamicBalanceEqualsSerial) {
  for (ModelKind kind : {ModelKind::fc3, ModelKind::lenet5}) {
    const Trained want = serial_reference(kind, false);
    TrainConfig config = config_for(kind, 2, "strict", 2);
    config.options["widths"] = "s=2";
    config.options["balance"] = "dynamic";
    config.options["slowdown"] = "0:3";
    nlohmann::json metrics;
    const Trained got = run_stream(config, &metrics);
    const std::string what = std::string(model_name(kind)) + " balanced dynamically";
    expect_equivalent(got, want, config, what);
    EXPECT_EQ(metrics["balance"], "dynamic");
    const auto shares = metrics["copy_shares"].get<std::vector<int>>();
    ASSERT_EQ(shares.size(), 2u);
    EXPECT_EQ(shares[0] + shares[1], batch / 2) << what;
    EXPECT_GE(shares[0], 1) << what;
    // Over the whole run, not the last group's shares: on a loaded machine the measured times of
    // one group can swing the shares back for a while.
    const auto samples = metrics["copy_samples"].get<std::vector<std::int64_t>>();
    ASSERT_EQ(samples.size(), 2u);
    EXPECT_LT(samples[0], samples[1]) << what << ": the slowed copy kept its half";
    EXPECT_EQ(metrics["slowdown"]["factor"], 3.0);
  }
}

// The source's rule: at a group's first micro-batch, samples move from the copy that took longer
// towards equal times; within 5% the shares stay; every micro-batch records its counts and
// offsets.
TEST(StreamStrategy, DynamicSharesFollowTheCopiesBusyTimes) {
  TrainingPlan plan;
  plan.microbatches = 2;
  plan.window = 2;
  plan.micro_batch = 64;
  plan.sample_groups = 2;
  plan.part = 63;
  plan.balance_dynamic = true;
  FlowTable run(plan);  // shares {32, 32}
  ASSERT_EQ(run.shares(), (std::vector<int>{32, 32}));
  EXPECT_EQ(run.count(1, 0), 0) << "no counts before the source assigns them";
  run.add_busy(0, 2e-3);  // copy 0 took twice as long for the same share
  run.add_busy(1, 1e-3);
  run.assign_shares(1);  // not a group's start: no change
  EXPECT_EQ(run.count(1, 0), 32);
  run.assign_shares(2);
  EXPECT_NEAR(run.count(2, 0), 21, 1);
  EXPECT_EQ(run.count(2, 0) + run.count(2, 1), 64);
  EXPECT_EQ(run.offset(2, 0), 0);
  EXPECT_EQ(run.offset(2, 1), run.count(2, 0));
  const int settled = run.count(2, 0);
  run.add_busy(0, 1.02e-3);  // now within the tolerance
  run.add_busy(1, 1e-3);
  run.assign_shares(4);
  EXPECT_EQ(run.count(4, 0), settled);
}

// The same N copies compute the same sums in the same order on every run.
TEST(StreamStrategy, FissionRerunsAreBitIdentical) {
  TrainConfig config = config_for(ModelKind::lenet5, 2, "strict", 2);
  config.options["widths"] = "s=2";
  const Trained first = run_stream(config);
  const Trained second = run_stream(config);
  EXPECT_TRUE(std::equal(first.model.params.begin(), first.model.params.end(),
                         second.model.params.begin()));
}

TEST(StreamStrategy, GraphFileShowsThePartition) {
  const test::TempDir dir;
  const auto path = dir.path() / "graph.dot";
  TrainConfig config = config_for(ModelKind::lenet5, 2, "strict", 4);
  config.options["graph"] = path.string();
  auto strategy = make_strategy("stream");
  strategy->prepare(initial(config.model), data(), config);
  std::ifstream file(path);
  std::stringstream dot;
  dot << file.rdbuf();
  EXPECT_NE(dot.str().find("cluster_core0"), std::string::npos);
  EXPECT_NE(dot.str().find("cluster_core1"), std::string::npos);
  EXPECT_NE(dot.str().find("s0.c1.k0.c0.fwd"), std::string::npos);
  EXPECT_NE(dot.str().find("s1.c2.k0.c0.bwd"), std::string::npos);
  EXPECT_NE(dot.str().find("s1.loss"), std::string::npos);
  EXPECT_NE(dot.str().find("samples"), std::string::npos);
  config.options["widths"] = "s=1";
  make_strategy("stream")->prepare(initial(config.model), data(), config);
  std::ifstream paper(path);
  std::stringstream paper_dot;
  paper_dot << paper.rdbuf();
  EXPECT_NE(paper_dot.str().find("c1.k1.c0.fwd"), std::string::npos);
  EXPECT_EQ(paper_dot.str().find("s0."), std::string::npos);
}

}  // namespace
}  // namespace cnnbench
