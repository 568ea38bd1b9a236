// compare's model: match the measured points of two reports, take the ratio of median times and
// ask the Mann-Whitney U test whether the raw repetitions differ beyond noise; list what makes the
// two incomparable (machine, build, settings) or incomplete (missing or failed points).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/records.hpp"
#include "cnnbench/sweep.hpp"

namespace cnnbench {

namespace {

std::string points_text(std::size_t count) {
  return std::to_string(count) + (count == 1 ? " point" : " points");
}

// A context value as text for comparison and messages; nothing when the report lacks it.
std::optional<std::string> context_text(const nlohmann::json& report,
                                        const nlohmann::json::json_pointer& where) {
  const auto context = report.find("context");
  if (context == report.end() || !context->contains(where)) return std::nullopt;
  const nlohmann::json& value = context->at(where);
  if (value.is_null()) return std::nullopt;
  return value.is_string() ? value.get<std::string>() : value.dump();
}

// "AMD family 25 model 17 (Zen 4)" from the cpu object, or cpu_model for reports made before it.
std::optional<std::string> cpu_text(const nlohmann::json& report, bool use_cpu_object) {
  using pointer = nlohmann::json::json_pointer;
  if (!use_cpu_object) return context_text(report, pointer("/cpu_model"));
  const auto part = [&](const char* key) {
    return context_text(report, pointer("/cpu") / key).value_or("?");
  };
  return part("vendor") + " family " + part("family") + " model " + part("model") + " (" +
         part("microarchitecture") + ")";
}

bool has_cpu_object(const nlohmann::json& report) {
  const auto context = report.find("context");
  return context != report.end() && context->is_object() && context->contains("cpu") &&
         context->at("cpu").is_object();
}

// Where a sweep's cores sat, from its core probes' handoffs (a cache line's round trip between
// each core and the first): "apart" where the slowest pair's median is core_apart_handoff_ns or
// more, else "close", with that median; nothing for a report without handoff probes. Two sweeps of
// one machine whose host placed its virtual cores on one die for the one and two dies for the
// other differ as two machines do: FC-3's 2-core speedups read 1.6 and 0.85 on the same Zen 4.
std::optional<std::pair<bool, double>> cores_apart(const nlohmann::json& report) {
  const SweepRecord sweep = as_sweep_record(report);
  if (!sweep.core_probes) return std::nullopt;
  const std::optional<CorePlacementRecord> pair = slowest_core_pair(*sweep.core_probes);
  if (!pair) return std::nullopt;
  return std::pair{pair->apart, pair->handoff_ns_median};
}

std::string placement_text(const std::pair<bool, double>& placement) {
  char text[120];
  std::snprintf(text, sizeof text, "%s (a cache line's round trip %.0f ns)",
                placement.first ? "apart, no cache shared" : "close", placement.second);
  return text;
}

}  // namespace

std::string ReportDifference::describe() const {
  return item + ": " + base + " (base) vs " + candidate + " (new)";
}

std::vector<MachineDifference> machine_differences(const nlohmann::json& base,
                                                   const nlohmann::json& candidate) {
  using pointer = nlohmann::json::json_pointer;
  std::vector<MachineDifference> differences;
  const auto check = [&](const char* item, const std::optional<std::string>& b,
                         const std::optional<std::string>& n) {
    if (b && n && *b != *n) differences.push_back({item, *b, *n});
  };
  const bool cpu_objects = has_cpu_object(base) && has_cpu_object(candidate);
  check("CPU", cpu_text(base, cpu_objects), cpu_text(candidate, cpu_objects));
  const std::pair<const char*, const char*> items[] = {{"core count", "/cores"},
                                                       {"SIMD target", "/simd/target"},
                                                       {"SIMD target per kernel", "/simd/kernels"},
                                                       {"OpenBLAS core type", "/openblas/core_type"},
                                                       {"compiler", "/build/compiler"},
                                                       {"build flags", "/build/flags"}};
  for (const auto& [item, where] : items) {
    check(item, context_text(base, pointer(where)), context_text(candidate, pointer(where)));
  }
  const auto b = cores_apart(base), n = cores_apart(candidate);
  if (b && n && b->first != n->first) differences.push_back({"cores' placement", placement_text(*b), placement_text(*n)});
  return differences;
}

std::vector<ReportDifference> config_differences(const nlohmann::json& base,
                                                 const nlohmann::json& candidate) {
  const nlohmann::json empty = nlohmann::json::object();
  const std::vector<Setting> new_settings = comparable_settings(candidate.value("config", empty));
  std::vector<ReportDifference> differences;
  for (const Setting& b : comparable_settings(base.value("config", empty))) {
    for (const Setting& n : new_settings) {
      if (n.name == b.name && n.value != b.value) differences.push_back({b.name, b.value, n.value});
    }
  }
  return differences;
}

std::vector<PointRecord> report_points(const nlohmann::json& report) {
  std::vector<PointRecord> points = as_sweep_record(report).points;
  std::erase_if(points, [](const PointRecord& p) { return !p.measured(); });
  return points;
}

namespace {

// What keeps a report from standing for a whole measurement, each line prefixed with `which`.
void add_unfinished(const SweepRecord& report, const std::string& which,
                    std::vector<std::string>& out) {
  auto failed = report.failed_points();
  // The peers measure PyTorch, not this code: their failures do not stop the gate.
  std::erase_if(failed, [](const PointRecord* p) { return p->peer.value_or(false); });
  const bool only_peers_failed = !report.interrupted && failed.empty() &&
                                 !report.failed_points().empty();
  if (!report.complete && !only_peers_failed) {
    out.push_back(which + " report is incomplete (\"complete\": false)" +
                  (report.interrupted ? ": the sweep was interrupted"
                   : failed.empty()   ? ": points are missing"
                                      : ""));
  }
  for (const PointRecord* p : failed) {
    out.push_back(which + " report: point " + p->id + " " +
                  (p->status == "diverged" ? "" : "failed: ") + p->reason);
  }
}

}  // namespace

bool Comparison::any_regression() const {
  return std::any_of(points.begin(), points.end(),
                     [](const ComparedPoint& p) { return p.regression && !p.peer; });
}

Comparison compare_reports(const nlohmann::json& base, const nlohmann::json& candidate,
                           double threshold, double alpha) {
  CNNBENCH_CHECK(threshold >= 0, "--threshold must not be negative");
  CNNBENCH_CHECK(alpha > 0 && alpha < 1, "--alpha must lie in (0, 1)");
  Comparison comparison;
  comparison.threshold = threshold;
  comparison.alpha = alpha;
  comparison.machine_differences = machine_differences(base, candidate);
  comparison.config_differences = config_differences(base, candidate);
  const SweepRecord base_record = as_sweep_record(base), new_record = as_sweep_record(candidate);
  add_unfinished(base_record, "base", comparison.unfinished);
  add_unfinished(new_record, "new", comparison.unfinished);
  std::map<std::string, const PointRecord*> new_points;
  for (const PointRecord& p : new_record.points) {
    if (p.measured()) new_points.emplace(p.id, &p);
  }

  for (const PointRecord& b : base_record.points) {
    if (!b.measured()) continue;
    const auto it = new_points.find(b.id);
    if (it == new_points.end()) {
      comparison.only_in_base.push_back(b.id);
      continue;
    }
    const PointRecord& n = *it->second;
    ComparedPoint c;
    c.id = b.id;
    c.peer = b.peer.value_or(false) || n.peer.value_or(false);
    if (b.images() > 0 && n.images() > 0) c.work_scale = b.images() / n.images();
    std::vector<double> new_times = n.times_s;
    for (double& t : new_times) t *= c.work_scale;
    c.base_median_s = b.time.median;
    c.new_median_s = n.time.median * c.work_scale;
    c.ratio = c.new_median_s / b.time.median;
    const MannWhitney test = mann_whitney_u(new_times, b.times_s);
    c.u = test.u;
    c.p_value = test.p_value;
    c.exact = test.exact;
    c.significant = test.p_value < alpha;
    // With few repetitions no outcome reaches p < alpha (3 vs 3: p >= 0.1); the rank test can then
    // not separate change from noise and the threshold alone decides.
    c.decided_by_threshold = test.min_p_value >= alpha;
    const bool beyond_noise = c.significant || c.decided_by_threshold;
    c.regression = c.ratio > 1.0 + threshold && beyond_noise;
    c.improvement = c.ratio < 1.0 - threshold && beyond_noise;
    comparison.points.push_back(c);
    new_points.erase(it);
  }
  for (const auto& [id, p] : new_points) comparison.only_in_new.push_back(id);
  return comparison;
}

const char* comparison_verdict(const ComparedPoint& c, double threshold) {
  if (c.regression) return "REGRESSION";
  if (c.improvement) return "faster";
  if (std::abs(c.ratio - 1.0) > threshold) return "noise";  // beyond the threshold, not significant
  return "same";
}

std::string comparison_summary(const Comparison& comparison) {
  std::size_t significant = 0, by_threshold = 0, within_noise = 0;
  for (const ComparedPoint& c : comparison.points) {
    if (c.peer) continue;  // not gated
    if (c.regression && c.significant) ++significant;
    if (c.regression && !c.significant) ++by_threshold;
    if (!c.regression && c.ratio > 1.0 + comparison.threshold) ++within_noise;
  }
  char percent[32];
  std::snprintf(percent, sizeof percent, "%.1f%%", 100 * comparison.threshold);
  char alpha[32];
  std::snprintf(alpha, sizeof alpha, "%.3g", comparison.alpha);
  std::vector<std::string> parts;
  if (significant > 0) {
    parts.push_back(points_text(significant) + " more than " + percent +
                    " slower, beyond noise (p < " + alpha + ")");
  }
  if (by_threshold > 0) {
    parts.push_back(points_text(by_threshold) + " more than " + percent +
                    " slower; too few repetitions to tell from noise, so the threshold alone "
                    "decided (measure more --repeat to know)");
  }
  if (!parts.empty()) {
    std::string line = "regression: " + parts[0];
    if (parts.size() > 1) line += "; " + parts[1];
    return line;
  }
  if (within_noise > 0) {
    return std::string("no regression shown beyond ") + percent + ": " + points_text(within_noise) +
           " slower beyond it, but within noise (p >= " + alpha + ")";
  }
  return std::string("no regression beyond ") + percent;
}

nlohmann::json comparison_json(const Comparison& comparison) {
  const auto differences = [](const std::vector<ReportDifference>& list) {
    nlohmann::json out = nlohmann::json::array();
    for (const ReportDifference& d : list) {
      out.push_back({{"item", d.item}, {"base", d.base}, {"new", d.candidate}});
    }
    return out;
  };
  nlohmann::json points = comparison.points;
  for (std::size_t i = 0; i < points.size(); ++i) {
    points[i]["verdict"] = comparison_verdict(comparison.points[i], comparison.threshold);
  }
  return {{"threshold", comparison.threshold},
          {"alpha", comparison.alpha},
          {"regression", comparison.any_regression()},
          {"summary", comparison_summary(comparison)},
          {"points", points},
          {"only_in_base", comparison.only_in_base},
          {"only_in_new", comparison.only_in_new},
          {"machine_differences", differences(comparison.machine_differences)},
          {"config_differences", differences(comparison.config_differences)},
          {"unfinished", comparison.unfinished}};
}

}  // namespace cnnbench
