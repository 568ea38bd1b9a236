// Whole-model training steps (forward + backward + SGD, as the serial strategy runs them) of FC-3
// and LeNet-5 at batch 16, 64 and 256, reporting images/s, GFLOP/s of training work and its
// share of one core's sgemm peak.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "benchmarks.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"
#include "cnnbench/models.hpp"
#include "micro_common.hpp"

namespace cnnbench::micro {

namespace {

void register_train_step(ModelKind kind) {
  benchmark::RegisterBenchmark(
      ("train_step/" + std::string(model_name(kind))).c_str(), [kind](benchmark::State& state) {
        const int B = int(state.range(0));
        Model model(kind);
        init_params(model.params, kind, 1);
        Workspace workspace(kind, B);
        Rng rng(2);
        aligned_vector<float> x(std::size_t(B) * 784);
        for (auto& v : x) v = rng.next_float();
        std::vector<std::uint8_t> y(B);
        for (auto& label : y) label = std::uint8_t(rng.below(10));
        const SgdConfig sgd;
        for (auto _ : state) {
          // As the serial strategy steps: backward writes over the last step's gradient.
          benchmark::DoNotOptimize(forward_backward(kind, model.params.data(), model.grads.data(),
                                                    x.data(), y.data(), B, 1.0f / float(B),
                                                    workspace, GradientWrite::overwrite));
          sgd_step(model.params.data(), model.grads.data(), model.momentum.data(),
                   model.params.size(), sgd);
          benchmark::ClobberMemory();
        }
        state.counters["images/s"] =
            benchmark::Counter(double(B), benchmark::Counter::kIsIterationInvariantRate);
        set_flops(state, B * model_spec(kind).train_flops_per_image);
      })
      ->ArgName("batch")
      ->Arg(16)
      ->Arg(64)
      ->Arg(256);
}

// A batch's images to floats and its labels, in a shuffled epoch's order over a set of MNIST's
// size (47 MB of pixels: more than a core's share of L3, as in training), batch after batch.
void register_gather_batch() {
  benchmark::RegisterBenchmark("gather_batch/mnist_size", [](benchmark::State& state) {
    const int B = int(state.range(0));
    const Dataset data = make_synthetic(60000, 1);
    const std::vector<std::uint32_t> order = epoch_order(data.count, 1, 0, true);
    aligned_vector<float> x(std::size_t(B) * data.image_size());
    std::vector<std::uint8_t> y(static_cast<std::size_t>(B));
    std::size_t next = 0;
    for (auto _ : state) {
      if (next + std::size_t(B) > order.size()) next = 0;
      gather_batch(x.data(), y.data(), data, order.data() + next, B);
      next += std::size_t(B);
      benchmark::ClobberMemory();
    }
    state.counters["images/s"] =
        benchmark::Counter(double(B), benchmark::Counter::kIsIterationInvariantRate);
  })
      ->ArgName("batch")
      ->Arg(32)
      ->Arg(64);
}

}  // namespace

void register_model_benchmarks() {
  register_gather_batch();
  register_train_step(ModelKind::fc3);
  register_train_step(ModelKind::lenet5);
}

}  // namespace cnnbench::micro
