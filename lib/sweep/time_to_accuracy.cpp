// Time to accuracy, MLPerf-style: the clock starts before the data is touched and stops at the
// first test-set evaluation (every eval_every steps, inside the clock) that reaches the target.
// The training itself is run_training's, with its every-N-steps hook evaluating.
#include <algorithm>

#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"
#include "cnnbench/sweep.hpp"
#include "cnnbench/train.hpp"

namespace cnnbench {

void to_json(nlohmann::json& out, const TimeToAccuracyJob& job) {
  out = {{"config", job.config}, {"target", job.target}, {"eval_every", job.eval_every},
         {"max_steps", job.max_steps}};
}

void from_json(const nlohmann::json& in, TimeToAccuracyJob& job) {
  job.config = in.at("config");
  job.target = in.at("target").get<double>();
  job.eval_every = in.at("eval_every").get<std::int64_t>();
  job.max_steps = in.at("max_steps").get<std::int64_t>();
}

Dataset accuracy_test_set(const std::optional<std::filesystem::path>& data_dir,
                          std::size_t synthetic_samples, std::uint64_t seed) {
  if (data_dir) return load_mnist(*data_dir, Split::test);
  return make_synthetic(std::max<std::size_t>(synthetic_samples / 6, 1000), seed, synthetic_samples);
}

nlohmann::json measure_time_to_accuracy(const TimeToAccuracyJob& job, bool* primary) {
  CNNBENCH_CHECK(job.eval_every > 0, "--eval-every must be positive");
  CNNBENCH_CHECK(job.target > 0 && job.target <= 1, "--target-accuracy must lie in (0, 1]");
  TrainConfig config = job.config.get<TrainConfig>();
  config.steps = job.max_steps;
  const double start = now_seconds();  // before the data is touched

  Dataset train;
  std::optional<std::filesystem::path> data_dir;
  std::size_t samples = 0;
  if (job.config.contains("data_dir")) {
    data_dir = job.config.at("data_dir").get<std::string>();
    train = load_mnist(*data_dir, Split::train);
  } else {
    samples = job.config.at("synthetic").get<std::size_t>();
    train = make_synthetic(samples, config.seed);
  }
  const Dataset test = accuracy_test_set(data_dir, samples, config.seed);
  CNNBENCH_CHECK(static_cast<std::int64_t>(train.count) >= config.batch,
                 "time to accuracy: the training set is smaller than one batch");

  nlohmann::json curve = nlohmann::json::array();
  bool reached = false;
  double reached_seconds = 0;
  std::int64_t reached_step = 0;
  RunOptions options;
  options.every_steps = job.eval_every;
  // Every rank evaluates the same weights on the same data, so all ranks stop at the same step.
  options.on_every_steps = [&](std::int64_t step, const Model& model) {
    const double accuracy = evaluate(config.model, model.params.data(), test).accuracy;
    const double seconds = now_seconds() - start;
    curve.push_back({{"step", step}, {"seconds", seconds}, {"accuracy", accuracy}});
    if (accuracy >= job.target) {
      reached = true;
      reached_seconds = seconds;
      reached_step = step;
    }
    return reached;
  };
  const RunResult result = run_training(config, train, options);
  if (primary != nullptr) *primary = result.primary;
  return {{"target", job.target},
          {"reached", reached},
          {"seconds", reached ? nlohmann::json(reached_seconds) : nlohmann::json(nullptr)},
          {"steps", reached ? nlohmann::json(reached_step) : nlohmann::json(nullptr)},
          {"eval_every", job.eval_every},
          {"max_steps", job.max_steps},
          {"test_samples", test.count},
          {"curve", curve}};
}

}  // namespace cnnbench
