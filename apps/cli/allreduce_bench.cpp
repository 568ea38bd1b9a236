// `cnnbench allreduce-bench`: times MPI_Allreduce over message sizes under mpirun, with Open MPI's
// algorithm forced or not, and fits t(n) = alpha + n beta; or (--exchange) times the pairwise
// exchange of recursive doubling and Rabenseifner. Rank 0 prints (or writes) the JSON the sweep's
// scaling model and the fabric profiles read.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cnnbench/cluster.hpp"
#include "cnnbench/collective_model.hpp"
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
  std::string algorithm;  // empty: whatever the environment says (Open MPI's own choice by default)
  bool allow_one_rank = false;
  bool force = false;
};

#if CNNBENCH_HAVE_MPI
// What only a build with MPI runs: asking Open MPI for an algorithm and labelling its answer.
// MPI_Allreduce is the tuned component's, whose forced algorithm needs its dynamic rules on;
// MPI_Iallreduce is libnbc's.
struct AlgorithmControl {
  const char* variable;       // the OMPI_MCA_* environment variable
  const char* setting;        // its MPI_T name, as the report's open_mpi holds it
  const char* dynamic_rules;  // the variable that must be 1 too, or nullptr
  int (*id)(AllreduceAlgorithm);
  std::vector<AllreduceAlgorithm> algorithms;  // what it can be asked for
};
const AlgorithmControl tuned{"OMPI_MCA_coll_tuned_allreduce_algorithm",
                             "coll_tuned_allreduce_algorithm",
                             "OMPI_MCA_coll_tuned_use_dynamic_rules",
                             open_mpi_algorithm_id,
                             {AllreduceAlgorithm::open_mpi_default, AllreduceAlgorithm::basic_linear,
                              AllreduceAlgorithm::nonoverlapping, AllreduceAlgorithm::recursive_doubling,
                              AllreduceAlgorithm::ring, AllreduceAlgorithm::segmented_ring,
                              AllreduceAlgorithm::rabenseifner}};
const AlgorithmControl libnbc{"OMPI_MCA_coll_libnbc_iallreduce_algorithm",
                              "coll_libnbc_iallreduce_algorithm",
                              nullptr,
                              libnbc_algorithm_id,
                              {AllreduceAlgorithm::open_mpi_default, AllreduceAlgorithm::ring,
                               AllreduceAlgorithm::binomial, AllreduceAlgorithm::rabenseifner,
                               AllreduceAlgorithm::recursive_doubling}};
constexpr const char* segment_variable = "OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize";

const AlgorithmControl& control_of(bool nonblocking) { return nonblocking ? libnbc : tuned; }

std::optional<int> integer_variable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == 0) return std::nullopt;
  try {
    return std::stoi(value);
  } catch (const std::exception&) {
    fail(std::string(name) + "=" + value + ": not a whole number");
  }
}

AllreduceAlgorithm algorithm_of_id(const AlgorithmControl& control, int id) {
  for (AllreduceAlgorithm a : control.algorithms) {
    if (control.id(a) == id) return a;
  }
  fail(std::string(control.variable) + "=" + std::to_string(id) + ": not an algorithm id Open MPI 4.1 has there");
}

// The algorithm this run asks Open MPI for. --algorithm sets the MCA variables in this rank's
// environment before MPI_Init reads them (each rank runs this); without it, a caller's
// OMPI_MCA_* variables (mpirun -x, or exported) count, the tuned one only with dynamic rules on.
AllreduceAlgorithm ask_for_algorithm(const std::string& flag, const AlgorithmControl& control) {
  const std::optional<int> preset = integer_variable(control.variable);
  const bool dynamic =
      control.dynamic_rules == nullptr || integer_variable(control.dynamic_rules).value_or(0) != 0;
  if (flag.empty()) {
    return preset && dynamic ? algorithm_of_id(control, *preset) : AllreduceAlgorithm::open_mpi_default;
  }
  const AllreduceAlgorithm asked = parse_allreduce_algorithm(flag);
  const int id = control.id(asked);
  if (preset && *preset != id) {
    fail("--algorithm " + flag + " is Open MPI's algorithm " + std::to_string(id) + ", but " +
         control.variable + "=" + std::to_string(*preset) + " is set: unset it or ask for the same");
  }
  if (asked != AllreduceAlgorithm::open_mpi_default) {
    if (control.dynamic_rules != nullptr) ::setenv(control.dynamic_rules, "1", 1);
    ::setenv(control.variable, std::to_string(id).c_str(), 1);
  }
  return asked;
}

// Open MPI read back after MPI_Init must hold the algorithm asked for, or the report would
// label Open MPI's own choice with it.
void check_library_took(AllreduceAlgorithm asked, const AlgorithmControl& control, const nlohmann::json& settings) {
  if (asked == AllreduceAlgorithm::open_mpi_default) return;
  const nlohmann::json& algorithm = settings.at(control.setting);
  if (algorithm.is_null()) return;  // no MPI_T variable to check against
  const nlohmann::json dynamic =
      control.dynamic_rules == nullptr ? nlohmann::json(1) : settings.at("coll_tuned_use_dynamic_rules");
  if (dynamic.is_null()) return;
  if (algorithm.get<int>() != control.id(asked) || dynamic.get<int>() == 0) {
    fail("asked Open MPI for allreduce algorithm " + std::string(algorithm_name(asked)) +
         " but after MPI_Init it holds " + control.setting + "=" + algorithm.dump() +
         (control.dynamic_rules == nullptr ? "" : ", coll_tuned_use_dynamic_rules=" + dynamic.dump()));
  }
}

// What Open MPI runs for `asked` at `count` floats: the tuned component's fallbacks for
// MPI_Allreduce, libnbc's choice for the in-place MPI_Iallreduce.
AllreduceAlgorithm run_of(AllreduceAlgorithm asked, std::int64_t count, int ranks, std::int64_t segment_elements,
                          bool nonblocking) {
  return nonblocking ? nonblocking_algorithm_run(asked, count, ranks, true)
                     : algorithm_run(asked, count, ranks, segment_elements);
}

nlohmann::json line_json(const FitLine& line) {
  return {{"alpha_s", line.alpha_s},
          {"beta_s_per_byte", line.beta_s_per_byte},
          {"bandwidth_gbps", line.beta_s_per_byte > 0 ? 1e-9 / line.beta_s_per_byte : 0.0},
          {"from_bytes", line.from_bytes},
          {"to_bytes", line.to_bytes},
          {"constrained", line.constrained}};
}

// The fit of the medians, its residuals, and the point-to-point link cost behind it under the
// algorithm that ran at the smallest (alpha) and largest (beta) fitted size.
nlohmann::json fit_json(const nlohmann::json& result, AllreduceAlgorithm asked, std::int64_t segment_elements,
                        bool nonblocking) {
  std::vector<SizeTime> points;
  for (const auto& size : result.at("sizes")) points.push_back({size.at("bytes"), size.at("seconds")});
  FitOptions options;
  const nlohmann::json& rate = result.at("network").at("link_rate");
  if (rate.is_string()) options.link_rate_bits_per_s = parse_tc_rate(rate.get<std::string>());
  const AllreduceFit fit = fit_allreduce(points, options);
  nlohmann::json residuals = nlohmann::json::array();
  for (std::size_t i = 0; i < fit.used.size(); ++i) {
    residuals.push_back({{"bytes", fit.used[i].bytes}, {"relative", fit.relative_residuals[i]}});
  }
  nlohmann::json pieces = nlohmann::json::array();
  for (const FitLine& piece : fit.pieces) pieces.push_back(line_json(piece));
  const int ranks = result.at("ranks");
  const double gamma = result.at("reduction").at("gamma_s_per_byte");
  const auto run_at = [&](double bytes) {
    return run_of(asked, static_cast<std::int64_t>(bytes / 4), ranks, segment_elements, nonblocking);
  };
  const AllreduceAlgorithm small = run_at(fit.used.front().bytes), large = run_at(fit.used.back().bytes);
  const LinkCost from_small = link_cost_from_fit(small, ranks, fit.pieces.front().alpha_s,
                                                 fit.pieces.front().beta_s_per_byte, gamma);
  const LinkCost from_large = link_cost_from_fit(large, ranks, fit.pieces.back().alpha_s,
                                                 fit.pieces.back().beta_s_per_byte, gamma);
  // Refused where it is made: a report whose link no scaling model can use is no profile.
  for (const auto& [link, piece] : {std::pair{from_small, fit.pieces.front()}, std::pair{from_large, fit.pieces.back()}}) {
    const std::string reason = unphysical_link_reason(link, piece.from_bytes, piece.to_bytes);
    if (!reason.empty()) fail(reason);
  }
  nlohmann::json out = line_json(fit.line);
  out["model"] = "t(n) = alpha + n * beta, least squares weighted by 1/t^2 (relative error) over "
                 "the medians; two pieces split at the eager limit when they cut the RMS relative "
                 "residual by 30%";
  out["kept"] = fit.pieces.size() > 1 ? "piecewise" : "line";
  out["eager_limit_bytes"] = options.eager_limit_bytes;
  out["pieces"] = pieces;
  out["rms_relative_residual"] = fit.rms_relative_residual;
  out["line_rms_relative_residual"] = fit.line_rms_relative_residual;
  out["residuals"] = residuals;
  out["excluded_bytes"] = fit.excluded_bytes;
  if (options.link_rate_bits_per_s) {
    out["excluded_reason"] = "inside the tbf burst of " +
                             std::to_string(static_cast<long long>(tbf_burst_bytes(*options.link_rate_bits_per_s))) +
                             " bytes at link rate " + rate.get<std::string>();
  }
  // Unforced, each end is inverted by the algorithm Open MPI's decision table runs there.
  out["link"] = {{"alpha_s", from_small.alpha_s},
                 {"alpha_from", algorithm_name(small)},
                 {"beta_s_per_byte", from_large.beta_s_per_byte},
                 {"beta_from", algorithm_name(large)},
                 {"gamma_s_per_byte", gamma}};
  return out;
}

// Per size: the algorithm asked for and the one Open MPI's fallbacks run for that count.
void label_algorithms(nlohmann::json& result, AllreduceAlgorithm asked, std::int64_t segment_elements,
                      bool nonblocking) {
  const int ranks = result.at("ranks");
  for (auto& size : result.at("sizes")) {
    size["algorithm_asked"] = algorithm_name(asked);
    size["algorithm_run"] = algorithm_name(
        run_of(asked, size.at("count").get<std::int64_t>(), ranks, segment_elements, nonblocking));
  }
}

#endif  // CNNBENCH_HAVE_MPI

// MPI_Allreduce of MPI_FLOAT moves whole 4-byte elements: a size in between is rounded up.
std::int64_t whole_floats(std::int64_t bytes) { return (bytes + 3) / 4 * 4; }

int run_allreduce_bench(const AllreduceArgs& a) {
  check_outputs({{.option = "--report", .path = a.report, .replace = a.force}});  // before the minutes of timing
#if CNNBENCH_HAVE_MPI
  const AlgorithmControl& control = control_of(a.config.nonblocking);
  const AllreduceAlgorithm asked = ask_for_algorithm(a.algorithm, control);
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
  if (config.exchange && ranks % 2 != 0) {
    if (rank == 0) {
      std::fprintf(stderr, "cnnbench: error: --exchange pairs rank r with rank r ^ 1, and %d ranks leave rank %d "
                           "without a partner: run an even number of ranks\n", ranks, ranks - 1);
    }
    return 2;
  }
  nlohmann::json result = allreduce_benchmark(config);
  // Rank 0 writes the report, with the machine, build and environment it was measured on (what
  // a fabric profile made from it cites).
  const auto write_report = [&] {
    if (rank != 0) return;
    result["context"] = collect_context();
    write_json(a.report, result);
  };
  // An exchange has no algorithm and no allreduce to fit: its medians are the curve itself.
  if (config.exchange) {
    result["fit"] = nullptr;
    write_report();
    return 0;
  }
  check_library_took(asked, control, result.at("open_mpi"));
  const std::int64_t segment_elements = integer_variable(segment_variable).value_or(0) / 4;
  result["algorithm_asked"] = algorithm_name(asked);
  label_algorithms(result, asked, segment_elements, config.nonblocking);
  // One rank's times are memory copies: nothing to fit a link to. A fit refused (too few sizes
  // left above a tbf burst) keeps the measured times in the report, with the reason, and exits 1.
  result["fit"] = nullptr;
  int status = 0;
  if (ranks > 1) {
    try {
      result["fit"] = fit_json(result, asked, segment_elements, config.nonblocking);
    } catch (const Error& e) {
      result["fit_refused"] = e.what();
      if (rank == 0) std::fprintf(stderr, "cnnbench: error: %s (the times are in the report)\n", e.what());
      status = 1;
    }
  }
  write_report();
  return status;
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
  cmd->add_option("--samples", args->config.samples, "timed samples per size (the median is reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--algorithm", args->algorithm,
                  "Open MPI allreduce algorithm to force: default, basic_linear, recursive_doubling, "
                  "ring, segmented_ring, rabenseifner (sets OMPI_MCA_coll_tuned_*), or with "
                  "--nonblocking default, ring, binomial, rabenseifner, recursive_doubling (sets "
                  "OMPI_MCA_coll_libnbc_iallreduce_algorithm); the report says per size which one ran "
                  "after Open MPI's fallbacks")
      ->check(CLI::IsMember({"default", "basic_linear", "recursive_doubling", "ring", "segmented_ring",
                             "rabenseifner", "binomial"}));
  cmd->add_flag("--nonblocking", args->config.nonblocking,
                "time MPI_Iallreduce in place and its wait, the call the cluster strategy makes, "
                "instead of MPI_Allreduce");
  cmd->add_flag("--exchange", args->config.exchange,
                "time MPI_Sendrecv of each size both ways between rank r and rank r ^ 1, every pair at "
                "once (the pairwise round of recursive doubling and Rabenseifner; an even rank count), "
                "instead of MPI_Allreduce: the exchange curve scaling-model --exchange reads");
  cmd->add_option("--warmup", args->config.warmup, "untimed calls per size")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--report", args->report, "where rank 0 writes the JSON ('-' = stdout)")
      ->check(output_path_rule(OutputKind::json))
      ->capture_default_str();
  add_force_flag(cmd, args->force, "--report file");
  cmd->add_flag("--allow-one-rank", args->allow_one_rank,
                "run on one rank too (without mpirun: no communication, only a memory copy is timed)");
  cmd->callback([args, &runner] {
    // Sizes double from the smallest; the fit alpha + n*beta has two parameters, and needs a third
    // size to say anything about its error. An exchange curve is a line between measured sizes.
    const std::int64_t smallest = whole_floats(args->config.min_bytes);
    const std::int64_t largest = whole_floats(args->config.max_bytes);
    if (smallest > largest) {
      throw CLI::ValidationError("--min-bytes " + std::to_string(args->config.min_bytes) +
                                 " is above --max-bytes " + std::to_string(args->config.max_bytes));
    }
    const bool exchange = args->config.exchange;
    if ((exchange ? 2 : 4) * smallest > largest) {
      throw CLI::ValidationError(
          "--min-bytes " + std::to_string(args->config.min_bytes) + " --max-bytes " +
          std::to_string(args->config.max_bytes) + ": " + (2 * smallest > largest ? "one message size" : "two message sizes") +
          " from " + std::to_string(smallest) + " bytes, and " +
          (exchange ? "an exchange curve needs at least 2; make --max-bytes at least 2 times --min-bytes"
                    : "the fit alpha + n*beta needs at least 3; make --max-bytes at least 4 times --min-bytes"));
    }
    if (exchange && (args->config.nonblocking || !args->algorithm.empty())) {
      throw CLI::ValidationError(std::string("--exchange times MPI_Sendrecv between pairs of ranks, not an allreduce: ") +
                                 "it takes no " + (args->config.nonblocking ? "--nonblocking" : "--algorithm"));
    }
    if (!args->algorithm.empty() && args->algorithm != "default") {
      const AllreduceAlgorithm asked = parse_allreduce_algorithm(args->algorithm);
      if (args->config.nonblocking) {
        try {
          libnbc_algorithm_id(asked);  // libnbc's list, with the message naming it
        } catch (const Error& e) {
          throw CLI::ValidationError("--algorithm " + args->algorithm + " --nonblocking: " + e.what());
        }
      }
      if (!args->config.nonblocking && asked == AllreduceAlgorithm::binomial) {
        throw CLI::ValidationError("--algorithm binomial is MPI_Iallreduce's (libnbc): add --nonblocking");
      }
    }
    runner = [args] { return run_allreduce_bench(*args); };
  });
}

}  // namespace cnnbench::cli
