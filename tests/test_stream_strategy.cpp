// The stream strategy against serial: strict mode equals mini-batch SGD (forward_backward +
// sgd_step) within 1e-4 per tensor after 50 steps for FC-3 and LeNet-5 on 1-4 cores;
// group-async equals its one-step-stale oracle; async trains; options fail with the flag's name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/train.hpp"
#include "tensor_compare.hpp"

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

// max|a-b| / max|b| per tensor, printing the first differing values on failure.
void expect_close(const Model& got, const Model& want, double tolerance, const std::string& what) {
  expect_tensors_close(got.params, want.params, want.kind, tolerance, what);
}

void expect_losses_close(const std::vector<double>& got, const std::vector<double>& want,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t s = 0; s < got.size(); ++s) {
    ASSERT_NEAR(got[s], want[s], 1e-4 * std::max(1.0, std::abs(want[s]))) << what << " step " << s;
  }
}

class StrictEqualsSerial : public ::testing::TestWithParam<std::tuple<ModelKind, int>> {};

TEST_P(StrictEqualsSerial, WeightsAndLossesMatchAfter50Steps) {
  const auto [kind, cores] = GetParam();
  static const Trained fc3 = serial_reference(ModelKind::fc3, false);
  static const Trained lenet5 = serial_reference(ModelKind::lenet5, false);
  const Trained& want = kind == ModelKind::fc3 ? fc3 : lenet5;
  const std::string what =
      std::string(model_name(kind)) + " on " + std::to_string(cores) + " cores";
  nlohmann::json metrics;
  const Trained got = run_stream(config_for(kind, cores, "strict", 4), &metrics);
  expect_close(got.model, want.model, 1e-4, what);
  expect_losses_close(got.losses, want.losses, what);
  for (const ParamTensor& t : want.model.spec().tensors) {
    double diff = 0;
    for (std::size_t i = t.offset; i < t.offset + t.count; ++i)
      diff = std::max(diff, std::abs(double(got.model.momentum[i]) - want.model.momentum[i]));
    EXPECT_LE(diff, 1e-4) << what << ": momentum of " << t.name;
  }
  EXPECT_EQ(metrics["staleness_histogram"].size(), 1u) << "strict never uses stale weights";
  EXPECT_EQ(metrics["cores"], cores);
}

INSTANTIATE_TEST_SUITE_P(ModelsAndCores, StrictEqualsSerial,
                         ::testing::Combine(::testing::Values(ModelKind::fc3, ModelKind::lenet5),
                                            ::testing::Values(1, 2, 3, 4)));

TEST(StreamStrategy, GroupAsyncEqualsTheOneStepStaleOracle) {
  for (ModelKind kind : {ModelKind::fc3, ModelKind::lenet5}) {
    const Trained want = serial_reference(kind, true);
    nlohmann::json metrics;
    const Trained got = run_stream(config_for(kind, 2, "group-async", 2), &metrics);
    expect_close(got.model, want.model, 1e-4, std::string(model_name(kind)) + " group-async");
    expect_losses_close(got.losses, want.losses, "group-async");
    EXPECT_EQ(metrics["consistency"], "group-async");
    EXPECT_GT(metrics["staleness_histogram"].value("1", 0), 0);
    EXPECT_EQ(metrics["staleness_histogram"].size(), 2u);
  }
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
  EXPECT_EQ(counted, metrics["graph"]["param_blocks"].get<std::int64_t>() * steps * 4);
  EXPECT_EQ(metrics["actor_core_map"].size(), metrics["graph"]["actors"].get<std::size_t>());
  EXPECT_GE(metrics["bubble_fraction"].get<double>(), 0.0);
  EXPECT_EQ(metrics["busy_seconds_per_core"].size(), 2u);
}

TEST(StreamStrategy, BadOptionsNameTheFlag) {
  auto message = [](TrainConfig config) {
    try {
      auto strategy = make_strategy("stream");
      strategy->prepare(initial(config.model), data(), config);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(config_for(ModelKind::fc3, 2, "strict", 3)).find("--microbatches"),
            std::string::npos);
  EXPECT_NE(message(config_for(ModelKind::fc3, 2, "eventual", 4)).find("--consistency"),
            std::string::npos);
  for (const char* widths : {"c9=2", "c1k", "c1k=0", "c1k=7", "f1=x", "f1=2,,f2=2"}) {
    TrainConfig config = config_for(ModelKind::lenet5, 2, "strict", 4);
    config.options["widths"] = widths;
    EXPECT_NE(message(config).find("--widths"), std::string::npos) << widths;
  }
  TrainConfig fc3 = config_for(ModelKind::fc3, 2, "strict", 4);
  fc3.options["widths"] = "c1k=2";
  EXPECT_NE(message(fc3).find("has no layer 'c1k'"), std::string::npos);
}

// Any splitjoin widths compute the same thing: uneven blocks, im2col conv blocks (c2 split by
// kernels), and every dense layer split, on 3 cores.
TEST(StreamStrategy, StrictWithOtherWidthsEqualsSerial) {
  const Trained want = serial_reference(ModelKind::lenet5, false);
  TrainConfig config = config_for(ModelKind::lenet5, 3, "strict", 4);
  config.options["widths"] = "c1k=4,c2k=3,c2c=2,f1=3,f2=2,f3=3";
  nlohmann::json metrics;
  const Trained got = run_stream(config, &metrics);
  expect_close(got.model, want.model, 1e-4, "lenet5 with widths");
  expect_losses_close(got.losses, want.losses, "lenet5 with widths");
  EXPECT_EQ(metrics["widths"]["c2_kernel_groups"], 3);
  EXPECT_EQ(metrics["widths"]["f3_blocks"], 3);
}

TEST(StreamStrategy, GraphFileShowsThePartition) {
  const auto path = std::filesystem::temp_directory_path() / "cnnbench_stream_test_graph.dot";
  TrainConfig config = config_for(ModelKind::lenet5, 2, "strict", 4);
  config.options["graph"] = path.string();
  auto strategy = make_strategy("stream");
  strategy->prepare(initial(config.model), data(), config);
  std::ifstream file(path);
  std::stringstream dot;
  dot << file.rdbuf();
  EXPECT_NE(dot.str().find("cluster_core0"), std::string::npos);
  EXPECT_NE(dot.str().find("cluster_core1"), std::string::npos);
  EXPECT_NE(dot.str().find("c1.k1.c0.fwd"), std::string::npos);
  EXPECT_NE(dot.str().find("loss"), std::string::npos);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace cnnbench
