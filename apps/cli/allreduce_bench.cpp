// `cnnbench allreduce-bench`: times MPI_Allreduce over message sizes under mpirun and fits
// t(n) = alpha + n beta; rank 0 prints (or writes) the JSON the sweep's scaling model reads.
#include "cnnbench/cluster.hpp"
#include "cnnbench/config.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/report.hpp"
#include "commands.hpp"

#if CNNBENCH_HAVE_MPI
#include <mpi.h>
#endif

namespace cnnbench::cli {

namespace {

struct AllreduceArgs {
  AllreduceBenchConfig config;
  std::string report = "-";
};

int run_allreduce_bench([[maybe_unused]] const AllreduceArgs& a) {
#if CNNBENCH_HAVE_MPI
  ensure_mpi_initialized();
  const nlohmann::json result = allreduce_benchmark(a.config);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) write_json(a.report, result);
  return 0;
#else
  fail("allreduce-bench needs MPI: this cnnbench was built without it (CNNBENCH_WITH_MPI=OFF or MPI not found)");
#endif
}

}  // namespace

void add_allreduce_bench_command(CLI::App& root, Runner& runner) {
  auto args = std::make_shared<AllreduceArgs>();
  CLI::App* cmd = root.add_subcommand(
      "allreduce-bench", "Time MPI_Allreduce per message size and fit alpha + n*beta (run under mpirun)");
  cmd->add_option("--min-bytes", args->config.min_bytes, "smallest message")
      ->check(CLI::Range(std::int64_t{4}, std::int64_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--max-bytes", args->config.max_bytes, "largest message (sizes double from the smallest)")
      ->check(CLI::Range(std::int64_t{4}, std::int64_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--repetitions", args->config.repetitions, "calls per size (0: about 5 ms per size)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--warmup", args->config.warmup, "untimed calls per size")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--report", args->report, "where rank 0 writes the JSON ('-' = stdout)")
      ->capture_default_str();
  cmd->callback([args, &runner] { runner = [args] { return run_allreduce_bench(*args); }; });
}

}  // namespace cnnbench::cli
