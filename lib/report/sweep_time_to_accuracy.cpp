// Time to accuracy, MLPerf-style: the clock starts before the data is touched and stops at the
// first test-set evaluation (every eval_every steps, inside the clock) that reaches the target.
#include <algorithm>

#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"
#include "cnnbench/sweep.hpp"
#include "cnnbench/train.hpp"

namespace cnnbench {

nlohmann::json measure_time_to_accuracy(const TimeToAccuracyJob& job, bool* primary) {
  CNNBENCH_CHECK(job.eval_every > 0, "--eval-every must be positive");
  CNNBENCH_CHECK(job.target > 0 && job.target <= 1, "--target-accuracy must lie in (0, 1]");
  const TrainConfig config = job.config.get<TrainConfig>();
  const double start = now_seconds();  // before the data is touched

  Dataset train, test;
  if (job.config.contains("data_dir")) {
    const std::filesystem::path dir = job.config.at("data_dir").get<std::string>();
    train = load_mnist(dir, Split::train);
    test = load_mnist(dir, Split::test);
  } else {
    const auto samples = job.config.at("synthetic").get<std::size_t>();
    train = make_synthetic(samples, config.seed);
    test = make_synthetic(std::max<std::size_t>(samples / 6, 1000), config.seed, samples);
  }
  const std::int64_t steps_per_epoch = static_cast<std::int64_t>(train.count) / config.batch;
  CNNBENCH_CHECK(steps_per_epoch > 0, "time to accuracy: the training set is smaller than one batch");

  Model model(config.model);
  init_params(model.params, config.model, config.seed);
  std::unique_ptr<Strategy> strategy = make_strategy(config.strategy);
  strategy->prepare(model, train, config);
  if (primary != nullptr) *primary = strategy->is_primary();

  nlohmann::json curve = nlohmann::json::array();
  std::int64_t step = 0;
  std::int64_t cached_epoch = -1;
  std::vector<std::uint32_t> order;
  bool reached = false;
  double reached_seconds = 0;
  while (step < job.max_steps && !reached) {
    const std::int64_t epoch = step / steps_per_epoch;
    const std::int64_t first = step % steps_per_epoch;
    if (epoch != cached_epoch) {
      order = epoch_order(train.count, config.seed, epoch, config.shuffle);
      cached_epoch = epoch;
    }
    const std::int64_t until_eval = job.eval_every - step % job.eval_every;
    const std::int64_t count = std::min({until_eval, steps_per_epoch - first, job.max_steps - step});
    strategy->run_steps({order.data(), first, count, step}, [](std::int64_t, double) {});
    step += count;
    if (step % job.eval_every != 0 && step != job.max_steps) continue;
    // Every rank evaluates the same weights on the same data, so all ranks stop at the same step.
    strategy->sync_to(model);
    const double accuracy = evaluate(config.model, model.params.data(), test).accuracy;
    const double seconds = now_seconds() - start;
    curve.push_back({{"step", step}, {"seconds", seconds}, {"accuracy", accuracy}});
    if (accuracy >= job.target) {
      reached = true;
      reached_seconds = seconds;
    }
  }
  return {{"target", job.target},
          {"reached", reached},
          {"seconds", reached ? nlohmann::json(reached_seconds) : nlohmann::json(nullptr)},
          {"steps", reached ? nlohmann::json(step) : nlohmann::json(nullptr)},
          {"eval_every", job.eval_every},
          {"max_steps", job.max_steps},
          {"test_samples", test.count},
          {"curve", curve}};
}

}  // namespace cnnbench
