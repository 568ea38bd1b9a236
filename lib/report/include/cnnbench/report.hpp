// Run reports: the provenance context (machine, build, versions, environment), JSON writing and
// the statistics every report uses.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cnnbench/time_breakdown.hpp"
#include "cnnbench/trace.hpp"

namespace cnnbench {

inline constexpr int report_schema_version = 1;

// date, host, CPU (cpu_model, and "cpu": vendor, family/model/stepping, microarchitecture, ISA
// flags, MHz), cores, topology summary, "simd": the kernels' target {target, best, compiled,
// supported}, compiler, flags, build type, git sha + dirty, library versions (OpenBLAS, hwloc,
// MPI, CUDA), "openblas": {core_type}, OPENBLAS_* / OMP_* / GOTO* / CNNBENCH_* environment.
nlohmann::json collect_context();
// The context's "build": version, type, compiler, flags, sanitizers, git sha and dirty flag.
nlohmann::json build_json();

// Which strategies this build has and, for those it lacks, why:
// {"serial": {"available": true, "description": ...}, "gpu": {"available": false, "reason": ...}}.
nlohmann::json build_features();

// The MPI library's own version line ("Open MPI v4.1.6, ..."), "" in builds without MPI.
std::string mpi_version_string();

// metrics.time_breakdown of a run report: the critical path's categories, per_layer and the
// workers' own; metrics.straggler: {kind, id, mean_excess, balanced_shares when balancing}.
nlohmann::json time_breakdown_json(const TimeBreakdown& breakdown);
nlohmann::json straggler_json(const TimeBreakdown& breakdown);
// The summary's line: "straggler: rank 1 was 1.90x slower than the median; balanced shares 44/20".
std::string straggler_line(const TimeBreakdown& breakdown);

// --trace: the trace in the Chrome Trace Event Format (Perfetto, chrome://tracing): a process
// per rank, a track per thread, a complete event ("X", ts/dur in microseconds, cat = the
// breakdown's category key, args.step) per span, named by its label, its layer or its category;
// flow events ("s"/"f") and counter events ("C"). docs/design.md, "Where the time goes".
nlohmann::json chrome_trace_json(const Trace& trace, const std::vector<std::string>& layer_names);

// Writes JSON (indented) to path with write_output, or to stdout when path is "-".
void write_json(const std::filesystem::path& path, const nlohmann::json& value);

struct Summary {
  double median = 0, min = 0, max = 0, mean = 0, mad = 0;  // mad = median absolute deviation
};
Summary summarize(std::span<const double> values);
nlohmann::json summary_json(const Summary& s);

}  // namespace cnnbench
