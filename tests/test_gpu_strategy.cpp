// The GPU strategy against serial: after 50 steps from the same init and order, every tensor
// matches within 1e-3 (max abs diff over max abs value), in both data modes, with and without
// CUDA graphs. Without a device these skip with the reason, and the no-device path is checked.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <set>
#include <string>
#include <sys/wait.h>

#include "cnnbench/config.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/gpu.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/time_breakdown.hpp"
#include "cnnbench/train.hpp"
#include "gpu_device.hpp"

namespace cnnbench {
namespace {

using test::no_device_reason;

struct RunOutput {
  Model model;
  std::vector<double> losses;
  nlohmann::json metrics;
};

// 50 steps in three ranges (the driver's pattern across epochs) through a strategy's interface.
RunOutput run_strategy(const std::string& strategy, ModelKind kind, const TrainConfig& config,
                       const Dataset& data) {
  Model model(kind);
  init_params(model.params, kind, config.seed);
  std::unique_ptr<Strategy> s = make_strategy(strategy);
  s->prepare(model, data, config);
  RunOutput out{Model(kind), {}, {}};
  const auto order = epoch_order(data.count, config.seed, 0, true);
  const std::int64_t steps_per_epoch = static_cast<std::int64_t>(data.count) / config.batch;
  std::int64_t done = 0;
  for (const std::int64_t count : {std::int64_t(1), std::int64_t(20), std::int64_t(29)}) {
    EXPECT_LE(done + count, steps_per_epoch);
    StepRange range{order.data(), done, count, done};
    s->run_steps(range, [&](std::int64_t, double loss) { out.losses.push_back(loss); });
    done += count;
  }
  s->sync_to(out.model);
  out.metrics = s->metrics();
  return out;
}

double relative_error(std::span<const float> a, std::span<const float> b, std::size_t* worst) {
  double max_diff = 0, max_ref = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    const double diff = std::fabs(double(a[i]) - double(b[i]));
    if (diff > max_diff) {
      max_diff = diff;
      *worst = i;
    }
    max_ref = std::max(max_ref, std::fabs(double(b[i])));
  }
  return max_ref > 0 ? max_diff / max_ref : max_diff;
}

struct GpuCase {
  ModelKind model;
  const char* data_mode;
  const char* graph;
  int batch;
};

class GpuMatchesSerial : public ::testing::TestWithParam<GpuCase> {};

TEST_P(GpuMatchesSerial, After50Steps) {
  const std::string reason = no_device_reason();
  if (!reason.empty()) GTEST_SKIP() << reason;
  const GpuCase c = GetParam();
  TrainConfig config;
  config.model = c.model;
  config.batch = c.batch;
  config.seed = 11;
  config.pin = false;
  config.sgd = {0.05f, 0.9f, 0.0005f};
  config.options = {{"gpu-data", c.data_mode}, {"gpu-graph", c.graph}};
  const Dataset data = make_synthetic(static_cast<std::size_t>(c.batch) * 50 + 3, 11);

  const RunOutput serial = run_strategy("serial", c.model, config, data);
  const RunOutput gpu = run_strategy("gpu", c.model, config, data);

  ASSERT_EQ(gpu.losses.size(), serial.losses.size());
  for (std::size_t i = 0; i < serial.losses.size(); ++i) {
    EXPECT_NEAR(gpu.losses[i], serial.losses[i], 1e-3 * std::max(1.0, serial.losses[i]))
        << "loss of step " << i;
  }
  for (const auto& t : serial.model.spec().tensors) {
    for (const bool momentum : {false, true}) {
      const auto& a = momentum ? gpu.model.momentum : gpu.model.params;
      const auto& b = momentum ? serial.model.momentum : serial.model.params;
      const std::span<const float> ta(a.data() + t.offset, t.count), tb(b.data() + t.offset, t.count);
      std::size_t worst = 0;
      const double err = relative_error(ta, tb, &worst);
      EXPECT_LE(err, 1e-3) << (momentum ? "momentum of " : "") << t.name << ": first worst element "
                           << worst << " = " << ta[worst] << " vs serial " << tb[worst];
    }
  }
  EXPECT_EQ(gpu.metrics.at("gpu_data"), c.data_mode);
  EXPECT_EQ(gpu.metrics.at("cuda_graph").get<bool>(), std::string(c.graph) == "on")
      << gpu.metrics.dump();
  EXPECT_EQ(gpu.metrics.at("steps").get<std::int64_t>(), 50);
  const double hidden = gpu.metrics.at("copy_hidden_fraction").get<double>();
  EXPECT_GE(hidden, 0.0);
  EXPECT_LE(hidden, 1.0);
  std::cout << "  " << model_name(c.model) << " " << c.data_mode << " graph " << c.graph << ": "
            << gpu.metrics.dump() << '\n';
}

INSTANTIATE_TEST_SUITE_P(
    Modes, GpuMatchesSerial,
    ::testing::Values(GpuCase{ModelKind::lenet5, "resident", "on", 64},
                      GpuCase{ModelKind::lenet5, "resident", "off", 33},
                      GpuCase{ModelKind::lenet5, "stream", "on", 64},
                      GpuCase{ModelKind::lenet5, "stream", "off", 17},
                      GpuCase{ModelKind::fc3, "resident", "on", 64},
                      GpuCase{ModelKind::fc3, "stream", "on", 31}));

// Where a GPU run's time went: the device stream's categories (timed by device timer stamps) add
// up to the driver's train_seconds, measured on the host, within 5% (the host's launch of a
// range's first kernel and its wait for the last are outside the device's steps); every layer,
// the gather and the update got time; the trace has the device track with a span per kernel group.
TEST(GpuStrategy, BreakdownAddsUpToTrainSecondsAndTheTraceHasTheDeviceTrack) {
  const std::string reason = no_device_reason();
  if (!reason.empty()) GTEST_SKIP() << reason;
  struct Case {
    ModelKind model;
    const char* data_mode;
    const char* graph;
  };
  for (const Case c :
       {Case{ModelKind::lenet5, "resident", "on"}, Case{ModelKind::lenet5, "stream", "on"},
        Case{ModelKind::lenet5, "resident", "off"}, Case{ModelKind::fc3, "resident", "on"}}) {
    const std::string name =
        std::string(model_name(c.model)) + " " + c.data_mode + " graph " + c.graph;
    TrainConfig config;
    config.model = c.model;
    config.strategy = "gpu";
    config.batch = 64;
    config.steps = 1000;
    config.pin = false;
    config.options = {{"gpu-data", c.data_mode}, {"gpu-graph", c.graph}};
    const Dataset data = make_synthetic(64 * 200, 5);
    RunOptions options;
    options.trace_steps = 20;
    const RunResult result = run_training(config, data, options);
    const TimeBreakdown& b = result.time_breakdown;

    ASSERT_EQ(b.steps, 1000) << name;
    ASSERT_EQ(b.workers.size(), 1u) << name;
    EXPECT_EQ(b.workers[0].worker.kind, "device") << name;
    const StepTimes& t = b.critical_path;
    double categories = 0;
    for (const double seconds : t.seconds) categories += seconds;
    EXPECT_NEAR(categories, t.wall, 1e-6 * t.wall) << name;
    EXPECT_NEAR(t.wall, result.train_seconds, 0.05 * result.train_seconds)
        << name << ": the device's steps against the host's train_seconds";
    double layers = 0;
    for (std::size_t l = 0; l < b.layer_names.size(); ++l) {
      EXPECT_GT(t.layer_seconds[l], 0.0) << name << " " << b.layer_names[l];
      layers += t.layer_seconds[l];
    }
    EXPECT_NEAR(layers, t[TimeCategory::compute], 1e-6 * t.wall) << name;
    EXPECT_GT(t[TimeCategory::data], 0.0) << name;
    EXPECT_GT(t[TimeCategory::update], 0.0) << name;

    // Track (rank 0, thread 1) is the device's: its spans are named by the kernel groups.
    const nlohmann::json trace = chrome_trace_json(result.trace, b.layer_names);
    std::set<std::string> device_names;
    bool host_track = false;
    for (const nlohmann::json& event : trace.at("traceEvents")) {
      if (event.at("ph") != "X") continue;
      if (event.at("tid") == 0) host_track = true;
      if (event.at("tid") == 1) device_names.insert(event.at("name").get<std::string>());
    }
    EXPECT_TRUE(host_track) << name;
    for (const std::string& expected : b.layer_names) {
      EXPECT_TRUE(device_names.count(expected)) << name << ": no device span " << expected;
    }
    EXPECT_TRUE(device_names.count("data")) << name;
    EXPECT_TRUE(device_names.count("update")) << name;
    std::cout << "  " << name << ": train_seconds " << result.train_seconds << ", device steps "
              << t.wall << ", compute " << t[TimeCategory::compute] << ", update "
              << t[TimeCategory::update] << ", data " << t[TimeCategory::data] << ", other "
              << t[TimeCategory::other] << '\n';
  }
}

TEST(GpuStrategy, BadOptionsNameTheFlag) {
  const std::string reason = no_device_reason();
  if (!reason.empty()) GTEST_SKIP() << reason;
  const Dataset data = make_synthetic(64, 1);
  const Model model(ModelKind::fc3);
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"gpu-data", "sometimes"}, {"device", "99"}, {"device", "x"}, {"gpu-graph", "maybe"}}) {
    TrainConfig config;
    config.model = ModelKind::fc3;
    config.pin = false;
    config.options[key] = value;
    auto s = make_strategy("gpu");
    try {
      s->prepare(model, data, config);
      ADD_FAILURE() << key << "=" << value << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--" + key), std::string::npos) << e.what();
    }
  }
}

TEST(GpuStrategy, DeviceListMatchesAvailability) {
  const auto devices = list_gpu_devices();
  const GpuRuntime runtime = gpu_runtime();
  EXPECT_EQ(devices.empty(), !runtime.unavailable_reason.empty()) << runtime.unavailable_reason;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    EXPECT_EQ(devices[i].index, static_cast<int>(i));
    EXPECT_FALSE(devices[i].name.empty());
    EXPECT_GT(devices[i].memory_bytes, 0u);
  }
  const nlohmann::json info = gpu_info_json();
  EXPECT_EQ(info.at("devices").size(), devices.size());
}

// Without a device: a clear cnnbench::Error, and `train --strategy gpu` exits 1 saying so.
TEST(GpuStrategy, NoDeviceIsAnErrorNotACrash) {
#if !CNNBENCH_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA: the strategy is reported unavailable instead";
#else
  if (!list_gpu_devices().empty()) GTEST_SKIP() << "a CUDA device is present";
  try {
    make_strategy("gpu");
    ADD_FAILURE() << "make_strategy(\"gpu\") succeeded without a device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
  const std::string command =
      std::string(CNNBENCH_CLI) + " train --strategy gpu --synthetic 256 --steps 2 --quiet 2>&1";
  std::string output;
  std::FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::array<char, 4096> buffer{};
  std::size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status)) << "cnnbench crashed:\n" << output;
  EXPECT_EQ(WEXITSTATUS(status), 1) << output;
  EXPECT_NE(output.find("no CUDA device"), std::string::npos) << output;
#endif
}

}  // namespace
}  // namespace cnnbench
