// cnnbench-micro: Google Benchmark runner for the library's kernels, OpenBLAS on one thread as
// in every strategy, so that the numbers are per core.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <string>

#include "benchmarks.hpp"

int main(int argc, char** argv) {
  openblas_set_num_threads(1);
  cnnbench::micro::register_layer_benchmarks();
  cnnbench::micro::register_model_benchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("openblas_config", openblas_get_config());
  benchmark::AddCustomContext("openblas_threads", std::to_string(openblas_get_num_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
