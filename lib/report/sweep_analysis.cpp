// The derived part of a sweep report: speedup, efficiency and Karp-Flatt per point, the Amdahl fit
// per series, and the cluster scaling prediction from the measured step time and allreduce cost.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "cnnbench/cluster_prediction.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/quantile.hpp"
#include "cnnbench/records.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/sweep.hpp"

namespace cnnbench {

namespace {

constexpr int max_predicted_nodes = 1024;

// Seconds per image of a repetition: the points of one sweep may run different steps
// (calibrated to --min-time), so their times compare per image, not per repetition.
double image_seconds(const PointRecord& point) {
  return point.images() > 0 ? point.time.median / point.images() : point.time.median;
}

double step_seconds(const PointRecord& point) {
  return point.time.median / static_cast<double>(point.steps.value_or(1));
}

std::vector<AmdahlRecord> amdahl_fits(const std::vector<PointRecord>& points, const std::string& model) {
  std::map<std::string, std::pair<std::vector<int>, std::vector<double>>> series;
  for (const PointRecord& p : points) {
    if (p.model != model || !p.measured() || !p.speedup) continue;
    auto& [cores, speedups] = series[p.series];
    cores.push_back(p.p);
    speedups.push_back(*p.speedup);
  }
  std::vector<AmdahlRecord> fits;
  for (const auto& [name, data] : series) {
    const auto& [cores, speedups] = data;
    if (std::none_of(cores.begin(), cores.end(), [](int c) { return c > 1; })) continue;
    const AmdahlFit fit = fit_amdahl(cores, speedups);
    fits.push_back({model, name, fit.serial_fraction, fit.rmse, fit.points});
  }
  return fits;
}

// The ring's link cost behind allreduce-bench's fit, when it measured more than one rank.
std::optional<CollectiveCost> allreduce_ring(const nlohmann::json& allreduce) {
  if (!allreduce.is_object() || !allreduce.contains("fit") || !allreduce.at("fit").is_object() ||
      allreduce.at("ranks").get<int>() < 2) {
    return std::nullopt;
  }
  const LinkCost link = link_cost_from_fit(
      AllreduceAlgorithm::ring, allreduce.at("ranks").get<int>(), allreduce.at("fit").at("alpha_s").get<double>(),
      allreduce.at("fit").at("beta_s_per_byte").get<double>(), 0);
  return CollectiveCost{link, 0};
}

ScalingPredictionRecord scaling_prediction(const SweepRecord& sweep, ModelKind kind, const PointRecord& serial) {
  const std::string model = model_name(kind);
  ScalingPredictionRecord out;
  out.model = model;
  out.gradient_bytes = 4.0 * static_cast<double>(model_spec(kind).param_count);
  const std::optional<CollectiveCost> ring = allreduce_ring(sweep.allreduce);
  if (!ring) {
    out.reason = sweep.allreduce.is_object() && sweep.allreduce.contains("reason")
                     ? sweep.allreduce.at("reason").get<std::string>()
                     : "no allreduce measurement on more than one rank";
    return out;
  }
  const int batch = sweep.config.at("batch").get<int>();
  const double serial_step = step_seconds(serial);
  const PointRecord* one_node = sweep.find_measured(model + "/cluster/n1c1");
  const double node_step = one_node != nullptr ? step_seconds(*one_node) : serial_step;

  auto predict = [&](int nodes) {
    const double total = predicted_step_seconds(node_step, batch, nodes, out.gradient_bytes, *ring);
    const double comm = allreduce_seconds(AllreduceAlgorithm::ring, nodes, out.gradient_bytes, *ring);
    return PredictedStepRecord{nodes, total, total - comm, comm, serial_step / total};
  };
  for (int nodes = 1; nodes <= max_predicted_nodes; nodes *= 2) out.predicted.push_back(predict(nodes));
  for (const PointRecord& p : sweep.points) {
    if (p.model != model || p.strategy != "cluster" || p.cores != 1 || !p.measured()) continue;
    out.measured_vs_predicted.push_back({p.nodes, p.speedup.value_or(0), predict(p.nodes).speedup});
  }
  out.available = true;
  out.one_node_step_s = node_step;
  out.one_node_step_source = one_node != nullptr ? model + "/cluster/n1c1" : model + "/serial/n1c1";
  out.serial_step_s = serial_step;
  out.batch = batch;
  out.alpha_s = ring->link.alpha_s;
  out.beta_s_per_byte = ring->link.beta_s_per_byte;
  return out;
}

// A one-core point of another strategy that runs faster than serial (median of the paired
// ratios above 1 + baseline_margin) means the serial reference is not the fastest one-thread
// path here, and every speedup divided by it is flattered.
constexpr double baseline_margin = 0.05;

std::optional<BaselineWarningRecord> baseline_warning(const std::vector<PointRecord>& points) {
  BaselineWarningRecord warning;
  warning.margin = baseline_margin;
  std::string ids;
  for (const PointRecord& p : points) {
    if (!p.measured() || p.strategy == "serial" || p.p != 1 || !p.speedup) continue;
    if (*p.speedup <= 1.0 + baseline_margin) continue;
    warning.points.push_back({p.id, *p.speedup});
    ids += (ids.empty() ? "" : ", ") + p.id;
  }
  if (warning.points.empty()) return std::nullopt;
  warning.message = "one-core points faster than the serial reference by more than " +
                    std::to_string(int(100 * baseline_margin)) + "%: " + ids +
                    "; speedups against serial overstate the gain";
  return warning;
}

// The sweep decides the core its pairs run on from the first rounds (the faster core then) and
// keeps it; a core that is slower over the whole sweep than the baseline's fastest by more than
// this flatters every speedup paired on it by as much.
constexpr double pair_core_margin = 0.05;

std::optional<BaselineWarningRecord> pair_core_warning(const std::vector<PointRecord>& points) {
  BaselineWarningRecord warning;
  warning.margin = pair_core_margin;
  std::string causes, ids;
  for (const PointRecord& serial : points) {
    if (serial.strategy != "serial" || !serial.measured() || !serial.baseline_cores) continue;
    const BaselineCoresRecord& cores = *serial.baseline_cores;
    const auto median_of = [&](int core) -> std::optional<double> {
      for (const CoreSeriesRecord& s : cores.per_core) {
        if (s.core == core && !s.times_s.empty()) return summarize(s.times_s).median;
      }
      return std::nullopt;
    };
    const std::optional<double> fastest = median_of(cores.chosen);
    if (!fastest || *fastest <= 0) continue;
    std::vector<int> slow_cores;
    for (const PointRecord& p : points) {
      if (p.model != serial.model || p.strategy == "serial" || !p.measured() || !p.speedup) continue;
      if (!p.paired_baseline || !p.paired_baseline->core || *p.paired_baseline->core == cores.chosen) continue;
      const int core = *p.paired_baseline->core;
      const std::optional<double> paired = median_of(core);
      if (!paired || *paired / *fastest - 1 <= pair_core_margin) continue;
      warning.points.push_back({p.id, *p.speedup});
      ids += (ids.empty() ? "" : ", ") + p.id;
      if (std::find(slow_cores.begin(), slow_cores.end(), core) != slow_cores.end()) continue;
      slow_cores.push_back(core);
      char text[200];
      std::snprintf(text, sizeof text, "%s's pairs ran on core %d, whose serial repetitions took %.0f%% longer than core %d's",
                    serial.model.c_str(), core, 100 * (*paired / *fastest - 1), cores.chosen);
      causes += (causes.empty() ? "" : "; ") + std::string(text);
    }
  }
  if (warning.points.empty()) return std::nullopt;
  warning.message = causes + " over the sweep (the pairs' core is decided in the first rounds, when it was the "
                    "faster): the paired speedups of " + ids + " are flattered by as much; speedup_unpaired "
                    "(against the fastest core's repetitions) is the fairer figure";
  return warning;
}

// A point whose paired ratios' middle half spans more than this fraction of their median has a
// median known to no better, whatever made the repetitions differ.
constexpr double spread_warning_fraction = 0.10;
constexpr std::size_t spread_warning_min_pairs = 5;

std::optional<std::string> spread_warning(const PointRecord& p) {
  if (!p.paired_baseline || p.paired_baseline->ratios.size() < spread_warning_min_pairs) return std::nullopt;
  const std::vector<double>& ratios = p.paired_baseline->ratios;
  const double low = quantile(ratios, 0.25), high = quantile(ratios, 0.75), middle = median(ratios);
  if (!(middle > 0) || (high - low) / middle <= spread_warning_fraction) return std::nullopt;
  char text[400];
  std::snprintf(text, sizeof text,
                "the middle half of its %zu paired ratios spans %.2f-%.2f, %.0f%% of their median %.2f, %s: "
                "its speedup is known to no better than that; more --repeat narrows it",
                ratios.size(), low, high, 100 * (high - low) / middle, middle,
                p.slow_core_warnings.empty()
                    ? "while no core probe fell below its usual speed (the repetitions differ among "
                      "themselves; a launched point's each is a new launch)"
                    : "with repetitions next to a slow core (slow_core_warnings)");
  return std::string(text);
}

// Every point's images/s against PyTorch on one thread (pytorch/n1c1) of the same model: how a
// strategy compares with the framework a user already has.
void add_pytorch_ratios(SweepRecord& sweep) {
  for (PointRecord& p : sweep.points) {
    const PointRecord* torch = sweep.find_measured(p.model + "/pytorch/n1c1");
    p.vs_pytorch_1thread.reset();
    if (torch == nullptr || !torch->images_per_s || !p.measured() || !p.images_per_s) continue;
    p.vs_pytorch_1thread = p.images_per_s->median / torch->images_per_s->median;
  }
}

}  // namespace

void add_scaling_analysis(SweepRecord& sweep) {
  add_pytorch_ratios(sweep);
  sweep.amdahl.clear();
  sweep.scaling_prediction.clear();
  for (ModelKind kind : {ModelKind::fc3, ModelKind::lenet5}) {
    const std::string model = model_name(kind);
    const PointRecord* found = sweep.find_measured(model + "/serial/n1c1");
    if (found == nullptr) continue;
    const PointRecord serial = *found;
    for (PointRecord& p : sweep.points) {
      if (p.model != model || !p.measured()) continue;
      // Against the serial repetitions paired with the point's own where it has them; against
      // the baseline point otherwise (kept as speedup_unpaired either way).
      const double unpaired = speedup(image_seconds(serial), image_seconds(p));
      double s = unpaired;
      if (p.paired_baseline && !p.paired_baseline->ratios.empty()) {
        s = summarize(p.paired_baseline->ratios).median;
      }
      p.speedup = s;
      p.speedup_unpaired = unpaired;
      p.spread_warning = spread_warning(p);
      p.efficiency = efficiency(s, p.p);
      p.karp_flatt = p.p > 1 ? std::optional<double>(karp_flatt(s, p.p)) : std::nullopt;
    }
    for (AmdahlRecord& fit : amdahl_fits(sweep.points, model)) sweep.amdahl.push_back(fit);
    sweep.scaling_prediction.push_back(scaling_prediction(sweep, kind, serial));
  }
  sweep.baseline_warning = baseline_warning(sweep.points);
  sweep.pair_core_warning = pair_core_warning(sweep.points);
  add_cluster_predictions(sweep);
}

void add_scaling_analysis(nlohmann::json& report) {
  SweepRecord sweep = report.get<SweepRecord>();
  add_scaling_analysis(sweep);
  report = sweep;
}

}  // namespace cnnbench
