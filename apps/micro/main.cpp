// cnnbench-micro: Google Benchmark runner for the library's kernels, OpenBLAS on one thread as
// in every strategy, so that the numbers are per core.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "benchmarks.hpp"
#include "cnnbench/isa_choice.hpp"
#include "micro_common.hpp"

namespace {

// --isa=TARGET or --isa TARGET, as train and sweep take it (or CNNBENCH_ISA; the flag wins),
// taken out of argv before Google Benchmark sees it. Returns false after printing why when the
// target is missing or this CPU cannot run it.
bool apply_isa_flag(int& argc, char** argv) {
  std::string isa = std::getenv("CNNBENCH_ISA") ? std::getenv("CNNBENCH_ISA") : "best";
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--isa=", 6) == 0) {
      isa = argv[i] + 6;
    } else if (std::strcmp(argv[i], "--isa") == 0) {
      if (i + 1 == argc) {
        std::fprintf(stderr, "cnnbench-micro: --isa needs a target (best, highest, avx3_dl, ...)\n");
        return false;
      }
      isa = argv[++i];
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  const std::string problem = cnnbench::isa_problem(isa);
  if (!problem.empty()) {
    std::fprintf(stderr, "cnnbench-micro: --isa: %s\n", problem.c_str());
    return false;
  }
  cnnbench::use_isa(isa);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (!apply_isa_flag(argc, argv)) return 2;
  openblas_set_num_threads(1);
  cnnbench::micro::register_layer_benchmarks();
  cnnbench::micro::register_onednn_benchmarks();
  cnnbench::micro::register_model_benchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("openblas_config", openblas_get_config());
  benchmark::AddCustomContext("openblas_threads", std::to_string(openblas_get_num_threads()));
  benchmark::AddCustomContext("simd_target", cnnbench::isa_info().active);
  benchmark::AddCustomContext("sgemm_peak_gflops_one_core",
                              std::to_string(cnnbench::micro::one_core_peak_gflops()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
