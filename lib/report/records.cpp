// The sweep report's records as JSON, both ways: every key name of a sweep report is here.
// Reading is lenient beyond what read_report checks (a field of the wrong type keeps its default),
// so that what the strict reader lets through can never make compare or the analysis throw.
#include "cnnbench/records.hpp"

#include <algorithm>
#include <limits>
#include <type_traits>

#include "cnnbench/sweep.hpp"
#include "cnnbench/train.hpp"

namespace cnnbench {

namespace {

using nlohmann::json;

// Whether a JSON value reads as a T without a type error or an out-of-range conversion.
template <class T>
bool readable(const json& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v.is_boolean();
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v.is_string();
  } else if constexpr (std::is_floating_point_v<T>) {
    return v.is_number();
  } else if constexpr (std::is_integral_v<T>) {
    if (v.is_number_unsigned()) return v.get<std::uint64_t>() <= std::uint64_t(std::numeric_limits<T>::max());
    return v.is_number_integer() && v.get<std::int64_t>() >= std::numeric_limits<T>::min() &&
           v.get<std::int64_t>() <= std::numeric_limits<T>::max();
  } else if constexpr (std::is_same_v<T, std::vector<double>>) {
    return v.is_array() && std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_number(); });
  } else {
    return true;  // json: anything
  }
}

// Reads in[key] into out when it is there and readable as out's type; else leaves out as it was.
template <class T>
void take(const json& in, const char* key, T& out) {
  const auto it = in.find(key);
  if (it != in.end() && readable<T>(*it)) out = it->get<T>();
}
template <class T>
void take(const json& in, const char* key, std::optional<T>& out) {
  const auto it = in.find(key);
  if (it != in.end() && readable<T>(*it)) out = it->get<T>();
}
// An object member read by from_json when it is an object.
template <class T>
void take_object(const json& in, const char* key, std::optional<T>& out) {
  const auto it = in.find(key);
  if (it == in.end() || !it->is_object()) return;
  T value;
  from_json(*it, value);
  out = std::move(value);
}
template <class T>
void take_objects(const json& in, const char* key, std::vector<T>& out) {
  const auto it = in.find(key);
  if (it == in.end() || !it->is_array()) return;
  out.clear();
  for (const json& item : *it) {
    if (!item.is_object()) continue;
    T value;
    from_json(item, value);
    out.push_back(std::move(value));
  }
}
template <class T>
json optional_json(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

// A config value as the text compare prints: strings bare, everything else as JSON.
std::string setting_text(const json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

}  // namespace

void from_json(const json& in, PairedBaselineRecord& pair) {
  take(in, "core", pair.core);
  take(in, "times_s", pair.times_s);
  take(in, "warmup_times_s", pair.warmup_times_s);
  take(in, "ratios", pair.ratios);
}
void to_json(json& out, const PairedBaselineRecord& pair) {
  out = {{"core", optional_json(pair.core)},
         {"times_s", pair.times_s},
         {"warmup_times_s", pair.warmup_times_s},
         {"ratios", pair.ratios},
         {"meaning", "a serial repetition ran just before each of the point's repetitions; "
                     "speedup is the median of the pairs' time ratios"}};
}

void from_json(const json& in, CoreSeriesRecord& series) {
  take(in, "core", series.core);
  take(in, "times_s", series.times_s);
  if (in.contains("images_per_s") && in.at("images_per_s").is_object()) {
    from_json(in.at("images_per_s"), series.images_per_s);
  }
}
void to_json(json& out, const CoreSeriesRecord& series) {
  out = {{"core", series.core}, {"times_s", series.times_s}, {"images_per_s", series.images_per_s}};
}

void from_json(const json& in, BaselineCoresRecord& cores) {
  take(in, "chosen", cores.chosen);
  take_objects(in, "per_core", cores.per_core);
}
void to_json(json& out, const BaselineCoresRecord& cores) {
  out = {{"chosen", cores.chosen},
         {"per_core", cores.per_core},
         {"meaning", "the baseline ran on each of these cores in turn; the fastest core's "
                     "repetitions are the point's times, so no speedup gains from a slow core"}};
}

void from_json(const json& in, AmdahlRecord& fit) {
  take(in, "model", fit.model);
  take(in, "series", fit.series);
  take(in, "serial_fraction", fit.serial_fraction);
  take(in, "rmse_inverse_speedup", fit.rmse_inverse_speedup);
  take(in, "points", fit.points);
}
void to_json(json& out, const AmdahlRecord& fit) {
  out = {{"model", fit.model}, {"series", fit.series}, {"serial_fraction", fit.serial_fraction},
         {"rmse_inverse_speedup", fit.rmse_inverse_speedup}, {"points", fit.points}};
}

void from_json(const json& in, PredictedStepRecord& step) {
  take(in, "nodes", step.nodes);
  take(in, "step_s", step.step_s);
  take(in, "compute_s", step.compute_s);
  take(in, "allreduce_s", step.allreduce_s);
  take(in, "speedup", step.speedup);
}
void to_json(json& out, const PredictedStepRecord& step) {
  out = {{"nodes", step.nodes}, {"step_s", step.step_s}, {"compute_s", step.compute_s},
         {"allreduce_s", step.allreduce_s}, {"speedup", step.speedup}};
}

void from_json(const json& in, MeasuredVsPredictedRecord& pair) {
  take(in, "nodes", pair.nodes);
  take(in, "measured_speedup", pair.measured_speedup);
  take(in, "predicted_speedup", pair.predicted_speedup);
}
void to_json(json& out, const MeasuredVsPredictedRecord& pair) {
  out = {{"nodes", pair.nodes}, {"measured_speedup", pair.measured_speedup},
         {"predicted_speedup", pair.predicted_speedup}};
}

void from_json(const json& in, ScalingPredictionRecord& s) {
  take(in, "model", s.model);
  take(in, "available", s.available);
  take(in, "reason", s.reason);
  take(in, "gradient_bytes", s.gradient_bytes);
  take(in, "batch", s.batch);
  take(in, "one_node_step_s", s.one_node_step_s);
  take(in, "one_node_step_source", s.one_node_step_source);
  take(in, "serial_step_s", s.serial_step_s);
  take(in, "alpha_s", s.alpha_s);
  take(in, "beta_s_per_byte", s.beta_s_per_byte);
  take_objects(in, "predicted", s.predicted);
  take_objects(in, "measured_vs_predicted", s.measured_vs_predicted);
}
void to_json(json& out, const ScalingPredictionRecord& s) {
  out = {{"model", s.model}, {"available", s.available}, {"gradient_bytes", s.gradient_bytes}};
  if (!s.available) {
    out["reason"] = s.reason;
    return;
  }
  out.update({{"model_description",
               "T(p) = t_node * ceil(B/p)/B + 2(p-1) alpha + 2(p-1)/p * n * beta; S(p) = t_serial / T(p)"},
              {"one_node_step_s", s.one_node_step_s},
              {"one_node_step_source", s.one_node_step_source},
              {"serial_step_s", s.serial_step_s},
              {"batch", s.batch},
              {"alpha_s", s.alpha_s},
              {"beta_s_per_byte", s.beta_s_per_byte},
              {"predicted", s.predicted},
              {"measured_vs_predicted", s.measured_vs_predicted}});
}

void from_json(const json& in, BaselineWarningRecord& warning) {
  take(in, "margin", warning.margin);
  take(in, "message", warning.message);
  if (!in.contains("points") || !in.at("points").is_array()) return;
  for (const json& p : in.at("points")) {
    std::string id;
    double speedup = 0;
    take(p, "id", id);
    take(p, "speedup", speedup);
    warning.points.emplace_back(id, speedup);
  }
}
void to_json(json& out, const BaselineWarningRecord& warning) {
  json points = json::array();
  for (const auto& [id, speedup] : warning.points) points.push_back({{"id", id}, {"speedup", speedup}});
  out = {{"points", points}, {"margin", warning.margin}, {"message", warning.message}};
}

void to_json(json& out, const Summary& s) {
  out = {{"median", s.median}, {"min", s.min}, {"max", s.max}, {"mean", s.mean}, {"mad", s.mad}};
}

void from_json(const json& in, Summary& s) {
  take(in, "median", s.median);
  take(in, "min", s.min);
  take(in, "max", s.max);
  take(in, "mean", s.mean);
  take(in, "mad", s.mad);
}

double PointRecord::images() const {
  if (!steps || !batch) return 0;
  const double images = static_cast<double>(*steps) * *batch;
  return images > 0 ? images : 0;
}

void to_json(json& out, const PointRecord& p) {
  out = {{"id", p.id},   {"model", p.model}, {"strategy", p.strategy}, {"cores", p.cores},
         {"nodes", p.nodes}, {"p", p.p},     {"series", p.series},     {"status", p.status}};
  if (!p.measured()) {
    out["reason"] = p.reason;
    return;
  }
  out["times_s"] = p.times_s;
  out["warmup_times_s"] = p.warmup_times_s;
  out["time"] = p.time;
  if (p.images_per_s) out["images_per_s"] = *p.images_per_s;
  if (p.steps) out["steps"] = *p.steps;
  if (p.batch) out["batch"] = *p.batch;
  if (p.final_loss) out["final_loss"] = *p.final_loss;
  if (!p.strategy_metrics.is_null()) out["strategy_metrics"] = p.strategy_metrics;
  if (!p.pin_map.is_null()) out["pin_map"] = p.pin_map;
  if (p.baseline_cores) out["baseline_cores"] = *p.baseline_cores;
  if (p.paired_baseline) out["paired_baseline"] = *p.paired_baseline;
  if (!p.time_to_accuracy.is_null()) out["time_to_accuracy"] = p.time_to_accuracy;
  if (p.speedup) {
    out["speedup"] = *p.speedup;
    out["speedup_unpaired"] = optional_json(p.speedup_unpaired);
    out["efficiency"] = optional_json(p.efficiency);
    out["karp_flatt"] = optional_json(p.karp_flatt);
  }
}

void from_json(const json& in, PointRecord& p) {
  take(in, "id", p.id);
  take(in, "model", p.model);
  take(in, "strategy", p.strategy);
  take(in, "series", p.series);
  take(in, "cores", p.cores);
  take(in, "nodes", p.nodes);
  p.p = p.cores * p.nodes;
  take(in, "p", p.p);
  take(in, "status", p.status);
  take(in, "reason", p.reason);
  take(in, "times_s", p.times_s);
  take(in, "warmup_times_s", p.warmup_times_s);
  if (in.contains("time") && in.at("time").is_object()) from_json(in.at("time"), p.time);
  take_object(in, "images_per_s", p.images_per_s);
  take(in, "steps", p.steps);
  take(in, "batch", p.batch);
  take(in, "final_loss", p.final_loss);
  take(in, "strategy_metrics", p.strategy_metrics);
  take(in, "pin_map", p.pin_map);
  take_object(in, "baseline_cores", p.baseline_cores);
  take_object(in, "paired_baseline", p.paired_baseline);
  take(in, "time_to_accuracy", p.time_to_accuracy);
  take(in, "speedup", p.speedup);
  take(in, "speedup_unpaired", p.speedup_unpaired);
  take(in, "efficiency", p.efficiency);
  take(in, "karp_flatt", p.karp_flatt);
}

const PointRecord* SweepRecord::find_measured(const std::string& id) const {
  for (const PointRecord& p : points) {
    if (p.id == id && p.measured()) return &p;
  }
  return nullptr;
}

std::vector<const PointRecord*> SweepRecord::failed_points() const {
  std::vector<const PointRecord*> failed;
  for (const PointRecord& p : points) {
    if (p.status == "failed") failed.push_back(&p);
  }
  return failed;
}

void to_json(json& out, const SweepRecord& sweep) {
  out = {{"schema_version", sweep_schema_version},
         {"kind", "sweep"},
         {"complete", sweep.complete},
         {"interrupted", sweep.interrupted},
         {"context", sweep.context},
         {"config", sweep.config},
         {"features", sweep.features},
         {"allreduce", sweep.allreduce},
         {"points", sweep.points},
         {"amdahl", sweep.amdahl},
         {"scaling_prediction", sweep.scaling_prediction}};
  if (sweep.baseline_warning) out["baseline_warning"] = *sweep.baseline_warning;
  if (sweep.elapsed_s) out["elapsed_s"] = *sweep.elapsed_s;
}

void from_json(const json& in, SweepRecord& sweep) {
  take(in, "complete", sweep.complete);
  take(in, "interrupted", sweep.interrupted);
  take(in, "context", sweep.context);
  take(in, "config", sweep.config);
  take(in, "features", sweep.features);
  take(in, "allreduce", sweep.allreduce);
  take_objects(in, "points", sweep.points);
  take_objects(in, "amdahl", sweep.amdahl);
  take_objects(in, "scaling_prediction", sweep.scaling_prediction);
  take_object(in, "baseline_warning", sweep.baseline_warning);
  take(in, "elapsed_s", sweep.elapsed_s);
}

SweepRecord run_as_sweep(const json& run) {
  SweepRecord sweep;
  take(run, "context", sweep.context);
  take(run, "config", sweep.config);
  const json metrics = run.value("metrics", json::object());
  const json& config = sweep.config;
  PointSpec spec;
  std::string model = "fc3";
  take(config, "model", model);
  spec.model = parse_model(model);
  take(config, "strategy", spec.strategy);
  take(config, "threads", spec.cores);
  PointRecord point;
  point.id = spec.id();
  point.model = model;
  point.strategy = spec.strategy;
  point.cores = spec.cores;
  point.p = spec.cores;
  point.series = spec.strategy;
  double seconds = 0;
  take(metrics, "train_seconds", seconds);
  point.times_s = {seconds};
  point.time = summarize(point.times_s);
  take(metrics, "steps", point.steps);
  take(config, "batch", point.batch);
  bool interrupted = false;
  take(metrics, "interrupted", interrupted);
  sweep.interrupted = interrupted;
  sweep.complete = !interrupted;
  sweep.points.push_back(point);
  return sweep;
}

SweepRecord as_sweep_record(const json& report) {
  return report.value("kind", "") == "run" ? run_as_sweep(report) : report.get<SweepRecord>();
}

std::vector<Setting> comparable_settings(const json& config) {
  std::vector<Setting> settings;
  const auto add = [&](const std::string& name, const json* value) {
    if (value != nullptr && !value->is_null()) settings.push_back({name, setting_text(*value)});
  };
  const auto member = [](const json& object, const char* key) -> const json* {
    const auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
  };
  if (!config.is_object()) return settings;
  for (const char* key : {"batch", "steps", "epochs", "lr", "momentum", "weight_decay", "warmup",
                          "pin", "isa"}) {
    add(key, member(config, key));
  }
  if (const json* data = member(config, "data"); data != nullptr && data->is_object()) {
    add("data source", member(*data, "source"));
    add("training samples", member(*data, "train_samples"));
  }
  // A sweep records its strategy options at the top of config, a run under "options".
  const json* run_options = member(config, "options");
  for (const OptionSpec* spec : strategy_option_specs()) {
    const json* value = run_options != nullptr && run_options->is_object()
                            ? member(*run_options, spec->name.c_str())
                            : member(config, spec->name.c_str());
    if (value != nullptr && !(value->is_string() && value->get<std::string>().empty())) {
      add(spec->name, value);
    }
  }
  return settings;
}

}  // namespace cnnbench
