// The run report's metrics.time_breakdown and metrics.straggler, and the summary's straggler
// line, from the typed breakdown a strategy measured (docs/design.md, "Where the time goes").
#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "cnnbench/report.hpp"
#include "cnnbench/time_breakdown.hpp"

namespace cnnbench {

namespace {

// The categories of one worker (or of the critical path): they add up to wall_s.
nlohmann::json category_json(const StepTimes& times) {
  nlohmann::json out = {{"wall_s", times.wall}, {"busy_s", times.busy()}};
  for (std::size_t c = 0; c < time_category_count; ++c) {
    const auto category = static_cast<TimeCategory>(c);
    if (category == TimeCategory::fill_drain || category == TimeCategory::starvation) continue;
    out[time_category_key(category)] = times[category];
  }
  const double fill_drain = times[TimeCategory::fill_drain];
  const double starvation = times[TimeCategory::starvation];
  out["pipeline_bubble_s"] = fill_drain + starvation;
  out["pipeline_bubble"] = {{"fill_drain_s", fill_drain}, {"starvation_s", starvation}};
  // Overlaps the categories (it is part of the working ones): not in their sum. A sum of
  // regions' wall minus CPU time read in microseconds may come out a hair below 0.
  out["descheduled_s"] = std::max(0.0, times.descheduled);
  out["involuntary_switches"] = static_cast<std::int64_t>(times.involuntary_switches);
  return out;
}

}  // namespace

nlohmann::json time_breakdown_json(const TimeBreakdown& breakdown) {
  nlohmann::json out = category_json(breakdown.critical_path);
  out["steps"] = breakdown.steps;
  out["other_descheduled_s"] = breakdown.other_descheduled;
  nlohmann::json per_layer = nlohmann::json::object();
  for (std::size_t l = 0; l < breakdown.layer_names.size() && l < max_timed_layers; ++l) {
    per_layer[breakdown.layer_names[l]] = breakdown.critical_path.layer_seconds[l];
  }
  out["per_layer"] = per_layer;
  nlohmann::json parts = nlohmann::json::object();
  for (std::size_t p = 0; p < compute_part_count; ++p) {
    parts[compute_part_key(static_cast<ComputePart>(p))] = breakdown.critical_path.part_seconds[p];
  }
  out["compute_parts"] = parts;
  out["meaning"] =
      "seconds summed over the measured steps along the critical path (each step's busiest "
      "worker); the categories add up to wall_s, the measured wall time of the steps, other_s "
      "is what no phase claimed; per_layer and compute_parts add up to compute_s; "
      "descheduled_s is the part of the working time the OS ran something else instead; "
      "other_descheduled_s the part of other_s it did (also in descheduled_s)";
  nlohmann::json workers = nlohmann::json::array();
  for (const WorkerBreakdown& worker : breakdown.workers) {
    nlohmann::json entry = category_json(worker.total);
    entry["kind"] = worker.worker.kind;
    entry["id"] = worker.worker.id;
    if (worker.worker.rank >= 0) entry["rank"] = worker.worker.rank;
    workers.push_back(std::move(entry));
  }
  out["workers"] = workers;
  return out;
}

nlohmann::json straggler_json(const TimeBreakdown& breakdown) {
  nlohmann::json out = {{"kind", breakdown.straggler.kind},
                        {"id", breakdown.straggler.id},
                        {"mean_excess", breakdown.straggler.mean_excess},
                        {"descheduled_share", breakdown.straggler.descheduled_share}};
  if (!breakdown.balanced_shares.empty()) out["balanced_shares"] = breakdown.balanced_shares;
  return out;
}

std::string straggler_line(const TimeBreakdown& breakdown) {
  const Straggler& s = breakdown.straggler;
  char text[160];
  std::snprintf(text, sizeof text, "straggler: %s %d was %.2fx slower than the median",
                s.kind.c_str(), s.id, s.mean_excess);
  std::string line = text;
  if (s.mean_excess > 1 && s.descheduled_share >= 0.5) {
    std::snprintf(text, sizeof text,
                  "; %.0f%% of that was time the OS ran something else on its core",
                  100 * s.descheduled_share);
    line += text;
  }
  if (!breakdown.balanced_shares.empty()) {
    line += "; balanced shares ";
    for (std::size_t i = 0; i < breakdown.balanced_shares.size(); ++i) {
      line += (i > 0 ? "/" : "") + std::to_string(breakdown.balanced_shares[i]);
    }
  }
  return line;
}

}  // namespace cnnbench
