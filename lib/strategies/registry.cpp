// The strategies this build knows, why any of them is missing, and the options each one reads.
#include "cnnbench/config.hpp"
#include "factories.hpp"

namespace cnnbench {

namespace {
struct Entry {
  StrategyInfo info;
  std::unique_ptr<Strategy> (*make)();
};

std::vector<Entry> entries() {
  return {
      {{"serial", true, "", "reference: one thread, one batch at a time", {}}, make_serial_strategy},
      {{"blas", true, "", "serial code, OpenBLAS with --threads threads (intra-op baseline)", {}},
       make_blas_strategy},
      {{"stream", true, "", "COStream-style dataflow pipeline on pinned cores", {}},
       make_stream_strategy},
#if CNNBENCH_HAVE_MPI
      {{"cluster", true, "", "data-parallel MapReduce of gradients over MPI ranks", {}},
       make_cluster_strategy},
#else
      {{"cluster", false, "built without MPI (CNNBENCH_WITH_MPI=OFF or MPI not found)",
        "data-parallel MapReduce of gradients over MPI ranks", {}},
       nullptr},
#endif
#if CNNBENCH_HAVE_CUDA
      {{"gpu", true, "", "CUDA + cuBLAS, one GPU per MPI rank", {}}, make_gpu_strategy},
#else
      {{"gpu", false, "built without CUDA (no CUDA toolkit found or CNNBENCH_WITH_CUDA=OFF)",
        "CUDA + cuBLAS, one GPU per MPI rank", {}},
       nullptr},
#endif
  };
}
}  // namespace

std::vector<StrategyInfo> list_strategies() {
  std::vector<StrategyInfo> out;
  for (auto& e : entries()) {
    for (const OptionSpec* spec : strategy_option_specs()) {
      if (spec->applies_to(e.info.name)) e.info.options.push_back(spec);
    }
    out.push_back(e.info);
  }
  return out;
}

std::unique_ptr<Strategy> make_strategy(const std::string& name) {
  std::string known;
  for (auto& e : entries()) {
    if (e.info.name == name) {
      if (!e.make) fail("strategy '" + name + "' is not available in this build: " + e.info.reason);
      return e.make();
    }
    known += (known.empty() ? "" : ", ") + e.info.name;
  }
  fail("unknown strategy '" + name + "' (known: " + known + ")");
}

}  // namespace cnnbench
