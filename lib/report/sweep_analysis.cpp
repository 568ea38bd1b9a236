// The derived part of a sweep report: speedup, efficiency and Karp-Flatt per point, the Amdahl fit
// per series, and the cluster scaling prediction from the measured step time and allreduce cost.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
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

// "3", "1-5", "0, 2-4": probe numbers as ranges.
std::string probe_list(const std::vector<int>& probes) {
  std::string text;
  for (std::size_t i = 0; i < probes.size();) {
    std::size_t j = i;
    while (j + 1 < probes.size() && probes[j + 1] == probes[j] + 1) ++j;
    text += (text.empty() ? "" : ", ") + std::to_string(probes[i]) + (j > i ? "-" + std::to_string(probes[j]) : "");
    i = j + 1;
  }
  return text;
}

// The pair of the slowest median handoff with its near and far times (a moved pair's probes on
// either side of the geometric middle of its fastest and slowest).
struct CorePair {
  CorePlacementRecord record;
  std::vector<double> near_ns, far_ns;
  std::size_t probes = 0;
};

std::optional<CorePair> slowest_pair(const CoreProbesRecord& core_probes) {
  std::optional<CorePair> worst;
  std::map<int, std::vector<const CoreProbeRecord*>> by_core;
  int first = -1;  // the core every other core passed the line to
  for (const CoreProbeRecord& probe : core_probes.probes) {
    if (first < 0 || probe.core < first) first = probe.core;
    if (probe.handoff_ns && *probe.handoff_ns > 0) by_core[probe.core].push_back(&probe);
  }
  for (const auto& [core, probes] : by_core) {
    std::vector<double> times;
    for (const CoreProbeRecord* probe : probes) times.push_back(*probe->handoff_ns);
    CorePair pair;
    pair.probes = probes.size();
    CorePlacementRecord& r = pair.record;
    r.core = core;
    r.partner = first;
    r.handoff_ns_min = *std::min_element(times.begin(), times.end());
    r.handoff_ns_max = *std::max_element(times.begin(), times.end());
    r.handoff_ns_median = median(times);
    r.apart = r.handoff_ns_median >= core_apart_handoff_ns;
    r.moved = r.handoff_ns_max >= core_moved_handoff_ratio * r.handoff_ns_min;
    if (r.moved) {
      const double middle = std::sqrt(r.handoff_ns_min * r.handoff_ns_max);
      for (const CoreProbeRecord* probe : probes) {
        const bool near = *probe->handoff_ns < middle;
        (near ? r.near_probes : r.far_probes).push_back(probe->probe);
        (near ? pair.near_ns : pair.far_ns).push_back(*probe->handoff_ns);
      }
    }
    const bool slower = !worst || r.handoff_ns_median > worst->record.handoff_ns_median;
    if (r.moved || slower) worst = std::move(pair);  // a move says more than a slower steady pair
  }
  return worst;
}

}  // namespace

std::optional<CorePlacementRecord> slowest_core_pair(const CoreProbesRecord& core_probes) {
  std::optional<CorePair> pair = slowest_pair(core_probes);
  if (!pair) return std::nullopt;
  return pair->record;
}

namespace {

// The cores' placement from the probes' handoffs (a cache line's round trip between each core and
// the first): the pair of the slowest median, said where it sits apart or moved during the sweep.
// On the 2-core Zen 4 host of 2026-12-07 the line took 72-94 ns within one die and 335-349 ns
// after the host moved a virtual core to another, and FC-3's 2-core speedups fell from 1.6 to 0.85
// with it while no probe of either core's own rates changed.
std::optional<CorePlacementRecord> core_placement(const SweepRecord& sweep) {
  if (!sweep.core_probes) return std::nullopt;
  std::optional<CorePair> worst = slowest_pair(*sweep.core_probes);
  if (!worst || (!worst->record.apart && !worst->record.moved)) return std::nullopt;
  CorePlacementRecord& r = worst->record;
  const std::string pair = "cores " + std::to_string(r.partner) + " and " + std::to_string(r.core);
  char numbers[160];
  if (r.moved) {
    // "94 ns at probe 0", "335-349 ns at probes 1-5"
    const auto side = [](const std::vector<double>& times, const std::vector<int>& at) {
      const double low = *std::min_element(times.begin(), times.end());
      const double high = *std::max_element(times.begin(), times.end());
      char text[48];
      if (std::lround(low) == std::lround(high)) {
        std::snprintf(text, sizeof text, "%.0f ns", low);
      } else {
        std::snprintf(text, sizeof text, "%.0f-%.0f ns", low, high);
      }
      return std::string(text) + " at probe" + (at.size() == 1 ? " " : "s ") + probe_list(at);
    };
    r.message = "a cache line's round trip between " + pair + " took " + side(worst->near_ns, r.near_probes) + " and " +
                side(worst->far_ns, r.far_probes) +
                " (probe k runs before round k): the cores moved apart or together during the sweep, as a "
                "host that places a virtual core on another die moves them, or their link got busier. A "
                "point that moves data between its cores (gradients summed across threads, tokens between "
                "pipeline stages, shared-memory allreduces) ran at two speeds, and its range spans both; "
                "measure it again where the handoff holds still";
  } else {
    std::snprintf(numbers, sizeof numbers, "%.0f ns (median of %zu probes, %.0f-%.0f)", r.handoff_ns_median,
                  worst->probes, r.handoff_ns_min, r.handoff_ns_max);
    r.message = pair + " pass a cache line in " + numbers +
                " a round trip: they share no cache level (two dies, or two sockets), and every byte a "
                "point moves between them crosses the fabric between dies; quote its multi-core speedups "
                "with this handoff (cores under one L3 pass a line in tens of nanoseconds)";
  }
  return r;
}

// A point whose paired ratios' middle half spans more than this fraction of their median has a
// median known to no better, whatever made the repetitions differ.
constexpr double spread_warning_fraction = 0.10;
constexpr std::size_t spread_warning_min_pairs = 5;

std::optional<std::string> spread_warning(const PointRecord& p, bool cores_moved) {
  if (!p.paired_baseline || p.paired_baseline->ratios.size() < spread_warning_min_pairs) return std::nullopt;
  const std::vector<double>& ratios = p.paired_baseline->ratios;
  const double low = quantile(ratios, 0.25), high = quantile(ratios, 0.75), middle = median(ratios);
  if (!(middle > 0) || (high - low) / middle <= spread_warning_fraction) return std::nullopt;
  char text[400];
  std::snprintf(text, sizeof text,
                "the middle half of its %zu paired ratios spans %.2f-%.2f, %.0f%% of their median %.2f, %s: "
                "its speedup is known to no better than that; more --repeat narrows it",
                ratios.size(), low, high, 100 * (high - low) / middle, middle,
                !p.slow_core_warnings.empty() ? "with repetitions next to a slow core (slow_core_warnings)"
                : cores_moved && p.p > 1
                    ? "while the cache line's round trip between the cores changed (core_placement)"
                    : "while no core probe fell below its usual speed (the repetitions differ among "
                      "themselves; a launched point's each is a new launch)");
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
  sweep.core_placement = core_placement(sweep);
  const bool cores_moved = sweep.core_placement && sweep.core_placement->moved;
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
      p.spread_warning = spread_warning(p, cores_moved);
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
