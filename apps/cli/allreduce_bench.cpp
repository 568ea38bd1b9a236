// `cnnbench allreduce-bench`: times MPI_Allreduce over message sizes under mpirun and fits
// t(n) = alpha + n beta; rank 0 prints (or writes) the JSON the sweep's scaling model reads.
#include <cstdio>
#include <string>
#include <tuple>

#include "cnnbench/cluster.hpp"
#include "cnnbench/config.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/report.hpp"
#include "commands.hpp"
#include "input_rules.hpp"

#if CNNBENCH_HAVE_MPI
#include <mpi.h>
#endif

namespace cnnbench::cli {

namespace {

struct AllreduceArgs {
  AllreduceBenchConfig config;
  std::string report = "-";
  bool allow_one_rank = false;
};

// MPI_Allreduce of MPI_FLOAT moves whole 4-byte elements: a size in between is rounded up.
std::int64_t whole_floats(std::int64_t bytes) { return (bytes + 3) / 4 * 4; }

int run_allreduce_bench(const AllreduceArgs& a) {
  check_output_path(a.report, "--report");  // before the minutes of timing
#if CNNBENCH_HAVE_MPI
  ensure_mpi_initialized();
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  // One rank has no link to measure: its "bandwidth" is a memory copy, thousands of GB/s.
  if (ranks < 2 && !a.allow_one_rank) {
    std::fprintf(stderr, "cnnbench: error: allreduce-bench measures communication between ranks, "
                         "and this is one rank: run it under mpirun -np N with N >= 2 (or pass "
                         "--allow-one-rank to time the one-rank call anyway)\n");
    return 2;
  }
  AllreduceBenchConfig config = a.config;
  config.min_bytes = whole_floats(a.config.min_bytes);
  config.max_bytes = whole_floats(a.config.max_bytes);
  if (rank == 0) {
    for (const auto& [flag, given, used] : {std::tuple{"--min-bytes", a.config.min_bytes, config.min_bytes},
                                            std::tuple{"--max-bytes", a.config.max_bytes, config.max_bytes}}) {
      if (given != used) {
        std::fprintf(stderr, "note: %s %lld rounded up to %lld (whole 4-byte floats)\n", flag,
                     static_cast<long long>(given), static_cast<long long>(used));
      }
    }
  }
  const nlohmann::json result = allreduce_benchmark(config);
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
      ->check(output_path_rule(OutputKind::json))
      ->capture_default_str();
  cmd->add_flag("--allow-one-rank", args->allow_one_rank,
                "run on one rank too (without mpirun: no communication, only a memory copy is timed)");
  cmd->callback([args, &runner] {
    // Sizes double from the smallest; the fit alpha + n*beta has two parameters, so it needs two
    // sizes at least (a fit with fewer points than parameters is refused).
    const std::int64_t smallest = whole_floats(args->config.min_bytes);
    const std::int64_t largest = whole_floats(args->config.max_bytes);
    if (smallest > largest) {
      throw CLI::ValidationError("--min-bytes " + std::to_string(args->config.min_bytes) +
                                 " is above --max-bytes " + std::to_string(args->config.max_bytes));
    }
    if (2 * smallest > largest) {
      throw CLI::ValidationError(
          "--min-bytes " + std::to_string(args->config.min_bytes) + " --max-bytes " +
          std::to_string(args->config.max_bytes) + ": one message size (" +
          std::to_string(smallest) + " bytes), and the fit alpha + n*beta needs at least 2; make "
          "--max-bytes at least twice --min-bytes");
    }
    runner = [args] { return run_allreduce_bench(*args); };
  });
}

}  // namespace cnnbench::cli
