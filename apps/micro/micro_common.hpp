// What the per-layer micro-benchmark files share: random inputs, the GFLOP/s counter, the batch
// sizes, and the layer shapes of FC-3 and LeNet-5 with their flop counts, so that every backend's
// rows (own kernels, sgemm, oneDNN) run the same shapes and count work the same way.
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "cnnbench/core.hpp"
#include "cnnbench/layers.hpp"
#include "cnnbench/models.hpp"

namespace cnnbench::micro {

inline constexpr int kBatches[] = {1, 16, 32, 64, 256};

inline aligned_vector<float> random_buffer(std::size_t n, std::uint64_t seed) {
  Rng rng(seed);
  aligned_vector<float> buffer(n);
  for (auto& x : buffer) x = rng.uniform(-1.0f, 1.0f);
  return buffer;
}

inline void set_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iteration / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

inline void with_batches(benchmark::internal::Benchmark* bench) {
  bench->ArgName("batch");
  for (int batch : kBatches) bench->Arg(batch);
}

// The timed loop of every kernel row: calls body() once per iteration, keeps what it wrote
// (`result`, or nothing) from being optimised away, and reports `flops` per call.
template <class Body>
void time_kernel(benchmark::State& state, double flops, const float* result, Body body) {
  for (auto _ : state) {
    body();
    if (result != nullptr) benchmark::DoNotOptimize(result);
    benchmark::ClobberMemory();
  }
  set_flops(state, flops);
}

// One kernel at batch B: `run` gets the batch, sets up (untimed) and returns the body, which is
// timed; flops_per_sample * B is the work of one call.
template <class Run>
void register_fused(const std::string& name, double flops_per_sample, Run run) {
  benchmark::RegisterBenchmark(name.c_str(), [flops_per_sample, run](benchmark::State& state) {
    const int B = int(state.range(0));
    time_kernel(state, flops_per_sample * B, nullptr, run(B));
  })->Apply(with_batches);
}

// --- the layer shapes and their flops --------------------------------------------------------
// Products count 2 flops per multiply-add; the bias gradient one per output; pooling 3 comparisons
// per 2x2 window.

struct DenseLayer {
  const char* name;
  int in, out;
  bool needs_dinp;  // false for a model's first layer
  double forward_flops(int B) const { return 2.0 * B * in * out; }
  double backward_flops(int B) const {
    return (needs_dinp ? 2 : 1) * forward_flops(B) + double(B) * out;
  }
};

struct ConvLayer {
  const char* name;
  int in_channels, size, out_channels, kernel, pad;
  bool needs_dinp;
  Conv2dShape shape(int batch) const {
    return {batch, in_channels, size, size, out_channels, kernel, pad};
  }
};

// Floats of a convolution's input (B,C,H,W), weight (K,C,R,R) and output (B,K,Ho,Wo).
inline std::size_t input_floats(const Conv2dShape& s) {
  return std::size_t(s.batch) * s.in_channels * s.height * s.width;
}
inline std::size_t weight_floats(const Conv2dShape& s) {
  return std::size_t(s.out_channels) * s.in_channels * s.kernel * s.kernel;
}
inline std::size_t output_floats(const Conv2dShape& s) {
  return std::size_t(s.batch) * s.out_channels * s.out_height() * s.out_width();
}

inline double conv_product_flops(const Conv2dShape& s) {
  return 2.0 * s.batch * s.out_channels * s.in_channels * s.kernel * s.kernel * s.out_height() *
         s.out_width();
}

inline double conv_backward_flops(const ConvLayer& layer, int B) {
  const Conv2dShape s = layer.shape(B);
  return (layer.needs_dinp ? 2 : 1) * conv_product_flops(s) +
         double(B) * s.out_channels * s.out_height() * s.out_width();
}

struct PoolLayer {
  const char* name;
  int channels, size;
  double flops(int B) const { return 3.0 * B * channels * (size / 2) * (size / 2); }
};

// The shapes of models.hpp's Fc3Sizes and Lenet5Sizes.
inline constexpr DenseLayer kFc3Dense[] = {{"fc3.f1", Fc3Sizes::input, Fc3Sizes::hidden1, false},
                                           {"fc3.f2", Fc3Sizes::hidden1, Fc3Sizes::hidden2, true},
                                           {"fc3.f3", Fc3Sizes::hidden2, Fc3Sizes::classes, true}};
inline constexpr ConvLayer kLenet5Conv[] = {
    {"lenet5.c1", 1, Lenet5Sizes::side, Lenet5Sizes::c1_channels, Lenet5Sizes::kernel,
     Lenet5Sizes::c1_pad, false},
    {"lenet5.c2", Lenet5Sizes::c1_channels, Lenet5Sizes::p1_side, Lenet5Sizes::c2_channels,
     Lenet5Sizes::kernel, 0, true}};
inline constexpr PoolLayer kLenet5Pool[] = {
    {"lenet5.pool1", Lenet5Sizes::c1_channels, Lenet5Sizes::side},
    {"lenet5.pool2", Lenet5Sizes::c2_channels, Lenet5Sizes::a2_side}};
inline constexpr DenseLayer kLenet5Dense[] = {
    {"lenet5.f1", Lenet5Sizes::flat, Lenet5Sizes::hidden1, true},
    {"lenet5.f2", Lenet5Sizes::hidden1, Lenet5Sizes::hidden2, true},
    {"lenet5.f3", Lenet5Sizes::hidden2, Lenet5Sizes::classes, true}};

}  // namespace cnnbench::micro
