// Trains FC-3 for a few steps on synthetic data through the installed library's public API.
#include <cstdio>

#include <cnnbench/train.hpp>

int main() {
  cnnbench::TrainConfig config;
  config.model = cnnbench::ModelKind::fc3;
  config.steps = 3;
  config.batch = 16;
  config.pin = false;
  const cnnbench::Dataset data = cnnbench::make_synthetic(64, 1);
  const cnnbench::RunResult result = cnnbench::run_training(config, data, {});
  std::printf("downstream: %lld steps, loss %.4f\n", static_cast<long long>(result.steps_run),
              result.step_losses.back());
  return result.steps_run == 3 ? 0 : 1;
}
