// compare's model: match the measured points of two reports, take the ratio of median times and
// ask the Mann-Whitney U test whether the raw repetitions differ beyond noise.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "cnnbench/core.hpp"
#include "cnnbench/sweep.hpp"

namespace cnnbench {

namespace {

std::string run_point_id(const nlohmann::json& config) {
  const std::string model = config.at("model").get<std::string>();
  const std::string strategy = config.at("strategy").get<std::string>();
  PointSpec spec;
  spec.model = parse_model(model);
  spec.strategy = strategy;
  spec.cores = config.at("threads").get<int>();
  return spec.id();
}

// steps x batch when both are positive numbers, else 0 (older or hand-made reports).
double images_of(const nlohmann::json& object, const char* steps_key, const nlohmann::json& holder,
                 const char* batch_key) {
  const auto steps = object.find(steps_key);
  const auto batch = holder.find(batch_key);
  if (steps == object.end() || batch == holder.end() || !steps->is_number() || !batch->is_number())
    return 0;
  const double images = steps->get<double>() * batch->get<double>();
  return images > 0 ? images : 0;
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

}  // namespace

std::string MachineDifference::describe() const {
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
                                                       {"OpenBLAS core type", "/openblas/core_type"},
                                                       {"compiler", "/build/compiler"},
                                                       {"build flags", "/build/flags"}};
  for (const auto& [item, where] : items) {
    check(item, context_text(base, pointer(where)), context_text(candidate, pointer(where)));
  }
  return differences;
}

std::vector<ReportPoint> report_points(const nlohmann::json& report) {
  std::vector<ReportPoint> points;
  if (report.at("kind") == "run") {
    const double seconds = report.at("metrics").at("train_seconds").get<double>();
    points.push_back({run_point_id(report.at("config")), {seconds}, seconds,
                      images_of(report.at("metrics"), "steps", report.at("config"), "batch")});
    return points;
  }
  for (const auto& p : report.at("points")) {
    if (p.at("status") != "ok") continue;
    points.push_back({p.at("id").get<std::string>(), p.at("times_s").get<std::vector<double>>(),
                      p.at("time").at("median").get<double>(), images_of(p, "steps", p, "batch")});
  }
  return points;
}

bool Comparison::any_regression() const {
  return std::any_of(points.begin(), points.end(), [](const ComparedPoint& p) { return p.regression; });
}

Comparison compare_reports(const nlohmann::json& base, const nlohmann::json& candidate,
                           double threshold, double alpha) {
  CNNBENCH_CHECK(threshold >= 0, "--threshold must not be negative");
  CNNBENCH_CHECK(alpha > 0 && alpha < 1, "--alpha must lie in (0, 1)");
  Comparison comparison;
  comparison.threshold = threshold;
  comparison.alpha = alpha;
  comparison.machine_differences = machine_differences(base, candidate);
  const std::vector<ReportPoint> base_points = report_points(base);
  std::map<std::string, ReportPoint> new_points;
  for (auto& p : report_points(candidate)) new_points.emplace(p.id, p);

  for (const ReportPoint& b : base_points) {
    const auto it = new_points.find(b.id);
    if (it == new_points.end()) {
      comparison.only_in_base.push_back(b.id);
      continue;
    }
    ReportPoint n = it->second;
    ComparedPoint c;
    c.id = b.id;
    if (b.images > 0 && n.images > 0) c.work_scale = b.images / n.images;
    for (double& t : n.times_s) t *= c.work_scale;
    c.base_median_s = b.median_s;
    c.new_median_s = n.median_s * c.work_scale;
    c.ratio = c.new_median_s / b.median_s;
    c.test = mann_whitney_u(n.times_s, b.times_s);
    // With few repetitions no outcome reaches p < alpha (3 vs 3: p >= 0.1); the rank test can then
    // not separate change from noise and the threshold alone decides.
    c.decided_by_threshold = c.test.min_p_value >= alpha;
    c.significant = c.decided_by_threshold || c.test.p_value < alpha;
    c.regression = c.ratio > 1.0 + threshold && c.significant;
    c.improvement = c.ratio < 1.0 - threshold && c.significant;
    comparison.points.push_back(c);
    new_points.erase(it);
  }
  for (const auto& [id, p] : new_points) comparison.only_in_new.push_back(id);
  return comparison;
}

nlohmann::json comparison_json(const Comparison& comparison) {
  nlohmann::json points = nlohmann::json::array();
  for (const ComparedPoint& c : comparison.points) {
    points.push_back({{"id", c.id},
                      {"base_median_s", c.base_median_s},
                      {"new_median_s", c.new_median_s},
                      {"work_scale", c.work_scale},
                      {"ratio", c.ratio},
                      {"u", c.test.u},
                      {"p_value", c.test.p_value},
                      {"exact", c.test.exact},
                      {"significant", c.significant},
                      {"decided_by_threshold", c.decided_by_threshold},
                      {"regression", c.regression},
                      {"improvement", c.improvement}});
  }
  nlohmann::json differences = nlohmann::json::array();
  for (const MachineDifference& d : comparison.machine_differences) {
    differences.push_back({{"item", d.item}, {"base", d.base}, {"new", d.candidate}});
  }
  return {{"threshold", comparison.threshold},
          {"alpha", comparison.alpha},
          {"regression", comparison.any_regression()},
          {"points", points},
          {"only_in_base", comparison.only_in_base},
          {"only_in_new", comparison.only_in_new},
          {"machine_differences", differences}};
}

}  // namespace cnnbench
