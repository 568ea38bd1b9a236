// What the per-layer micro-benchmark files share: random inputs, the GFLOP/s and peak_share
// counters, the batch sizes, and the layer shapes of FC-3 and LeNet-5 with their flop counts
// (layer_flops.hpp), so that every backend's rows (own kernels, sgemm, oneDNN) run the same shapes
// and count work the same way.
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "cnnbench/core.hpp"
#include "cnnbench/layers.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/machine.hpp"
#include "cnnbench/report.hpp"
#include "layer_flops.hpp"

namespace cnnbench::micro {

inline constexpr int kBatches[] = {1, 16, 32, 64, 256};

inline aligned_vector<float> random_buffer(std::size_t n, std::uint64_t seed) {
  Rng rng(seed);
  aligned_vector<float> buffer(n);
  for (auto& x : buffer) x = rng.uniform(-1.0f, 1.0f);
  return buffer;
}

// One core's OpenBLAS sgemm rate (GFLOP/s, lib/machine/peak.cpp, as `cnnbench info --peak`
// measures it), measured once per process on first use: main() calls it before any row runs, so
// that no row's timing includes it.
inline double one_core_peak_gflops() {
  static const double peak = measure_sgemm_peak(1, 0.3).at("gflops").get<double>();
  return peak;
}

// GFLOP/s of the row, and peak_share: that rate as a share of one_core_peak_gflops(), so that the
// rows farthest from what the core can do stand out.
inline void set_flops(benchmark::State& state, double flops_per_iteration) {
  const double gflop = flops_per_iteration / 1e9;
  state.counters["GFLOP/s"] =
      benchmark::Counter(gflop, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_share"] = benchmark::Counter(gflop / one_core_peak_gflops(),
                                                    benchmark::Counter::kIsIterationInvariantRate);
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

}  // namespace cnnbench::micro
