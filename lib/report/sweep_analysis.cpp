// The derived part of a sweep report: speedup, efficiency and Karp-Flatt per point, the Amdahl fit
// per series, and the cluster scaling prediction from the measured step time and allreduce cost.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/sweep.hpp"

namespace cnnbench {

namespace {

using nlohmann::json;

constexpr int max_predicted_nodes = 1024;

bool measured(const json& point) { return point.at("status") == "ok"; }

double step_seconds(const json& point) {
  return point.at("time").at("median").get<double>() / point.at("steps").get<double>();
}

json amdahl_fits(const json& points, const std::string& model) {
  std::map<std::string, std::pair<std::vector<int>, std::vector<double>>> series;
  for (const auto& p : points) {
    if (p.at("model") != model || !measured(p) || !p.contains("speedup")) continue;
    auto& [cores, speedups] = series[p.at("series").get<std::string>()];
    cores.push_back(p.at("p").get<int>());
    speedups.push_back(p.at("speedup").get<double>());
  }
  json fits = json::array();
  for (const auto& [name, data] : series) {
    const auto& [cores, speedups] = data;
    if (std::none_of(cores.begin(), cores.end(), [](int c) { return c > 1; })) continue;
    const AmdahlFit fit = fit_amdahl(cores, speedups);
    fits.push_back({{"model", model}, {"series", name}, {"serial_fraction", fit.serial_fraction},
                    {"rmse_inverse_speedup", fit.rmse}, {"points", fit.points}});
  }
  return fits;
}

json scaling_prediction(const json& report, const json& points, ModelKind kind,
                        const json& serial) {
  const std::string model = model_name(kind);
  json out = {{"model", model}};
  const json& allreduce = report.at("allreduce");
  if (!allreduce.is_object() || !allreduce.contains("fit") || allreduce.at("ranks").get<int>() < 2) {
    out["available"] = false;
    out["reason"] = allreduce.is_object() && allreduce.contains("reason")
                        ? allreduce.at("reason").get<std::string>()
                        : "no allreduce measurement on more than one rank";
    return out;
  }
  const RingAllreduceModel ring = ring_model_from_fit(
      allreduce.at("ranks").get<int>(), allreduce.at("fit").at("alpha_s").get<double>(),
      allreduce.at("fit").at("beta_s_per_byte").get<double>());
  const int batch = report.at("config").at("batch").get<int>();
  const double gradient_bytes = 4.0 * static_cast<double>(model_spec(kind).param_count);
  const double serial_step = step_seconds(serial);
  const json* one_node = find_measured_point(points, model + "/cluster/n1c1");
  const double node_step = one_node != nullptr ? step_seconds(*one_node) : serial_step;

  auto predict = [&](int nodes) {
    const double total = predicted_step_seconds(node_step, batch, nodes, gradient_bytes, ring);
    const double comm = ring.seconds(nodes, gradient_bytes);
    return json{{"nodes", nodes}, {"step_s", total}, {"compute_s", total - comm},
                {"allreduce_s", comm}, {"speedup", serial_step / total}};
  };
  json predicted = json::array();
  for (int nodes = 1; nodes <= max_predicted_nodes; nodes *= 2) predicted.push_back(predict(nodes));
  json versus = json::array();
  for (const auto& p : points) {
    if (p.at("model") != model || p.at("strategy") != "cluster" || p.at("cores") != 1 || !measured(p)) continue;
    const int nodes = p.at("nodes").get<int>();
    versus.push_back({{"nodes", nodes},
                      {"measured_speedup", p.at("speedup")},
                      {"predicted_speedup", predict(nodes).at("speedup")}});
  }
  out["available"] = true;
  out["model_description"] =
      "T(p) = t_node * ceil(B/p)/B + 2(p-1) alpha + 2(p-1)/p * n * beta; S(p) = t_serial / T(p)";
  out["one_node_step_s"] = node_step;
  out["one_node_step_source"] = one_node != nullptr ? model + "/cluster/n1c1" : model + "/serial/n1c1";
  out["serial_step_s"] = serial_step;
  out["batch"] = batch;
  out["gradient_bytes"] = gradient_bytes;
  out["alpha_s"] = ring.alpha_s;
  out["beta_s_per_byte"] = ring.beta_s_per_byte;
  out["predicted"] = predicted;
  out["measured_vs_predicted"] = versus;
  return out;
}

}  // namespace

const json* find_measured_point(const json& points, const std::string& id) {
  for (const auto& p : points) {
    if (p.at("id") == id && measured(p)) return &p;
  }
  return nullptr;
}

namespace {

// A one-core point of another strategy that runs faster than serial (median of the paired
// ratios above 1 + baseline_margin) means the serial reference is not the fastest one-thread
// path here, and every speedup divided by it is flattered.
constexpr double baseline_margin = 0.05;

json baseline_warning(const json& points) {
  json beaten = json::array();
  for (const auto& p : points) {
    if (!measured(p) || p.at("strategy") == "serial" || p.at("p") != 1 || !p.contains("speedup")) {
      continue;
    }
    const double s = p.at("speedup").get<double>();
    if (s > 1.0 + baseline_margin) beaten.push_back({{"id", p.at("id")}, {"speedup", s}});
  }
  if (beaten.empty()) return nullptr;
  std::string ids;
  for (const auto& b : beaten) ids += (ids.empty() ? "" : ", ") + b.at("id").get<std::string>();
  return {{"points", beaten},
          {"margin", baseline_margin},
          {"message", "one-core points faster than the serial reference by more than " +
                          std::to_string(int(100 * baseline_margin)) + "%: " + ids +
                          "; speedups against serial overstate the gain"}};
}

}  // namespace

void add_scaling_analysis(json& report) {
  json& points = report.at("points");
  json fits = json::array();
  json predictions = json::array();
  for (ModelKind kind : {ModelKind::fc3, ModelKind::lenet5}) {
    const std::string model = model_name(kind);
    const json* serial = find_measured_point(points, model + "/serial/n1c1");
    if (serial == nullptr) continue;
    const double base = serial->at("time").at("median").get<double>();
    for (auto& p : points) {
      if (p.at("model") != model || !measured(p)) continue;
      const int cores = p.at("p").get<int>();
      // Against the serial repetitions paired with the point's own where it has them; against
      // the baseline point otherwise (kept as speedup_unpaired either way).
      const double unpaired = speedup(base, p.at("time").at("median").get<double>());
      double s = unpaired;
      if (p.contains("paired_baseline")) {
        const auto ratios = p.at("paired_baseline").at("ratios").get<std::vector<double>>();
        if (!ratios.empty()) s = summarize(ratios).median;
      }
      p["speedup"] = s;
      p["speedup_unpaired"] = unpaired;
      p["efficiency"] = efficiency(s, cores);
      p["karp_flatt"] = cores > 1 ? json(karp_flatt(s, cores)) : json(nullptr);
    }
    for (auto& fit : amdahl_fits(points, model)) fits.push_back(fit);
    predictions.push_back(scaling_prediction(report, points, kind, *serial));
  }
  report["amdahl"] = fits;
  report["scaling_prediction"] = predictions;
  const json warning = baseline_warning(points);
  if (warning.is_null()) {
    report.erase("baseline_warning");
  } else {
    report["baseline_warning"] = warning;
  }
}

}  // namespace cnnbench
