// The sweep report's records as JSON, both ways: every key name of a sweep report is here, once,
// in a table of fields per record that both directions walk.
// Reading is lenient beyond what read_report checks (a field of the wrong type keeps its default),
// so that what the strict reader lets through can never make compare or the analysis throw.
#include "cnnbench/records.hpp"

#include <algorithm>
#include <limits>
#include <tuple>
#include <type_traits>

#include "cnnbench/sweep.hpp"
#include "cnnbench/train.hpp"

namespace cnnbench {

namespace {

using nlohmann::json;

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};

// Reads v into out when v has out's type (and range); false, leaving out alone, otherwise.
template <class T>
bool read_value(const json& v, T& out) {
  if constexpr (std::is_same_v<T, json>) {
    out = v;
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) return false;
    out = v.get<bool>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) return false;
    out = v.get<std::string>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) return false;
    out = v.get<T>();
  } else if constexpr (std::is_integral_v<T>) {
    if (v.is_number_unsigned()) {
      if (v.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<T>::max())) return false;
    } else if (!v.is_number_integer() || v.get<std::int64_t>() < std::numeric_limits<T>::min() ||
               v.get<std::int64_t>() > std::numeric_limits<T>::max()) {
      return false;
    }
    out = v.get<T>();
  } else if constexpr (is_optional<T>::value) {
    typename T::value_type value{};
    if (!read_value(v, value)) return false;
    out = std::move(value);
  } else if constexpr (is_vector<T>::value) {
    if (!v.is_array()) return false;
    out.clear();
    for (const json& item : v) {
      typename T::value_type value{};
      if (read_value(item, value)) out.push_back(std::move(value));
    }
  } else {  // a record
    if (!v.is_object()) return false;
    from_json(v, out);
  }
  return true;
}

// One member of a record and its key. `always`: written even when empty (an empty optional or
// null JSON as null, an empty list as []); otherwise left out then.
template <class Record, class T>
struct Field {
  const char* key;
  T Record::*member;
  bool always;
};
template <class Record, class T>
constexpr Field<Record, T> field(const char* key, T Record::*member) {
  return {key, member, true};
}
template <class Record, class T>
constexpr Field<Record, T> optional_field(const char* key, T Record::*member) {
  return {key, member, false};
}

template <class T>
bool empty_value(const T& value) {
  if constexpr (is_optional<T>::value) {
    return !value.has_value();
  } else if constexpr (std::is_same_v<T, json>) {
    return value.is_null();
  } else {
    return false;
  }
}

template <class Record, class... Fields>
void write_fields(json& out, const Record& record, const std::tuple<Fields...>& fields) {
  std::apply([&](const auto&... f) {
    const auto write = [&](const auto& one) {
      const auto& value = record.*(one.member);
      if constexpr (is_vector<std::decay_t<decltype(value)>>::value) {
        // An optional list is left out when empty (reports made before it read back unchanged).
        if (!one.always && value.empty()) return;
        out[one.key] = value;
      } else if (empty_value(value)) {
        if (one.always) out[one.key] = nullptr;
      } else if constexpr (is_optional<std::decay_t<decltype(value)>>::value) {
        out[one.key] = *value;
      } else {
        out[one.key] = value;
      }
    };
    (write(f), ...);
  }, fields);
}

template <class Record, class... Fields>
void read_fields(const json& in, Record& record, const std::tuple<Fields...>& fields) {
  std::apply([&](const auto&... f) {
    const auto read = [&](const auto& one) {
      const auto it = in.find(one.key);
      if (it != in.end()) read_value(*it, record.*(one.member));
    };
    (read(f), ...);
  }, fields);
}

using P = PointRecord;
const auto point_header = std::tuple{
    field("id", &P::id), field("model", &P::model), field("strategy", &P::strategy),
    field("cores", &P::cores), field("nodes", &P::nodes), field("p", &P::p),
    field("series", &P::series), field("status", &P::status), optional_field("launch", &P::launch),
    optional_field("peer", &P::peer), optional_field("options", &P::options),
    optional_field("tuned", &P::tuned), field("vs_pytorch_1thread", &P::vs_pytorch_1thread)};
const auto point_measured = std::tuple{
    field("times_s", &P::times_s), field("warmup_times_s", &P::warmup_times_s),
    field("time", &P::time), optional_field("images_per_s", &P::images_per_s),
    optional_field("steps", &P::steps), optional_field("batch", &P::batch),
    optional_field("final_loss", &P::final_loss), optional_field("strategy_metrics", &P::strategy_metrics),
    optional_field("pin_map", &P::pin_map), optional_field("median_repetition", &P::median_repetition),
    optional_field("time_breakdown", &P::time_breakdown), optional_field("straggler", &P::straggler),
    optional_field("noise_warning", &P::noise_warning), optional_field("spread_warning", &P::spread_warning),
    optional_field("trace", &P::trace),
    optional_field("baseline_cores", &P::baseline_cores),
    optional_field("paired_baseline", &P::paired_baseline),
    optional_field("time_to_accuracy", &P::time_to_accuracy),
    optional_field("calibration", &P::calibration), optional_field("prediction", &P::prediction),
    optional_field("peer_info", &P::peer_info), optional_field("rounds", &P::rounds),
    optional_field("started_s", &P::started_s), optional_field("rounds_done", &P::rounds_done),
    optional_field("slow_core_warnings", &P::slow_core_warnings)};
// Written together once the analysis ran (karp_flatt null at p = 1).
const auto point_derived = std::tuple{
    field("speedup", &P::speedup), field("speedup_unpaired", &P::speedup_unpaired),
    field("efficiency", &P::efficiency), field("karp_flatt", &P::karp_flatt)};

using S = ScalingPredictionRecord;
const auto prediction_common = std::tuple{
    field("model", &S::model), field("available", &S::available), field("gradient_bytes", &S::gradient_bytes)};
const auto prediction_available = std::tuple{
    field("one_node_step_s", &S::one_node_step_s), field("one_node_step_source", &S::one_node_step_source),
    field("serial_step_s", &S::serial_step_s), field("batch", &S::batch), field("alpha_s", &S::alpha_s),
    field("beta_s_per_byte", &S::beta_s_per_byte), field("predicted", &S::predicted),
    field("measured_vs_predicted", &S::measured_vs_predicted)};

using W = SweepRecord;
const auto sweep_fields = std::tuple{
    field("complete", &W::complete), field("interrupted", &W::interrupted),
    field("context", &W::context), field("config", &W::config), field("features", &W::features),
    field("allreduce", &W::allreduce), field("points", &W::points), field("amdahl", &W::amdahl),
    field("scaling_prediction", &W::scaling_prediction),
    optional_field("baseline_warning", &W::baseline_warning),
    optional_field("pair_core_warning", &W::pair_core_warning), optional_field("core_probes", &W::core_probes),
    optional_field("core_placement", &W::core_placement),
    optional_field("elapsed_s", &W::elapsed_s)};

const auto summary_fields =
    std::tuple{field("median", &Summary::median), field("min", &Summary::min), field("max", &Summary::max),
               field("mean", &Summary::mean), field("mad", &Summary::mad)};

using C = CoreSeriesRecord;
const auto core_series_fields =
    std::tuple{field("core", &C::core), field("times_s", &C::times_s), field("images_per_s", &C::images_per_s)};
const auto calibration_probe_fields = std::tuple{
    field("steps", &CalibrationProbeRecord::steps), field("seconds", &CalibrationProbeRecord::seconds)};
const auto calibration_fields = std::tuple{
    field("min_time_s", &CalibrationRecord::min_time_s), field("probes", &CalibrationRecord::probes)};
using A = AmdahlRecord;
const auto amdahl_fields = std::tuple{
    field("model", &A::model), field("series", &A::series), field("serial_fraction", &A::serial_fraction),
    field("rmse_inverse_speedup", &A::rmse_inverse_speedup), field("points", &A::points)};
using T = PredictedStepRecord;
const auto predicted_step_fields = std::tuple{
    field("nodes", &T::nodes), field("step_s", &T::step_s), field("compute_s", &T::compute_s),
    field("allreduce_s", &T::allreduce_s), field("speedup", &T::speedup)};
using M = MeasuredVsPredictedRecord;
const auto measured_vs_predicted_fields =
    std::tuple{field("nodes", &M::nodes), field("measured_speedup", &M::measured_speedup),
               field("predicted_speedup", &M::predicted_speedup)};
const auto beaten_point_fields = std::tuple{field("id", &BeatenPoint::id), field("speedup", &BeatenPoint::speedup)};
const auto launch_fields =
    std::tuple{field("launcher", &LaunchRecord::launcher), field("command", &LaunchRecord::command)};
using BW = BaselineWarningRecord;
const auto baseline_warning_fields =
    std::tuple{field("points", &BW::points), field("margin", &BW::margin), field("message", &BW::message)};

using R = RetryRecord;
const auto retry_fields = std::tuple{
    field("seconds", &R::seconds), optional_field("baseline_seconds", &R::baseline_seconds),
    optional_field("ratio", &R::ratio), field("probe_normal", &R::probe_normal)};
using SC = SlowCoreWarningRecord;
const auto slow_core_fields = std::tuple{
    field("core", &SC::core), field("round", &SC::round), field("probe", &SC::probe),
    optional_field("series_core", &SC::series_core), field("drop", &SC::drop),
    field("compute_drop", &SC::compute_drop), field("memory_drop", &SC::memory_drop),
    optional_field("handoff_drop", &SC::handoff_drop),
    field("dropped", &SC::dropped), field("every_core", &SC::every_core), field("seconds", &SC::seconds),
    optional_field("baseline_seconds", &SC::baseline_seconds), optional_field("ratio", &SC::ratio),
    field("retry", &SC::retry), field("used", &SC::used), field("message", &SC::message)};
using CP = CoreProbeRecord;
const auto core_probe_fields = std::tuple{
    field("probe", &CP::probe), field("core", &CP::core), field("compute_gflops", &CP::compute_gflops),
    field("memory_gbps", &CP::memory_gbps), field("started_s", &CP::started_s),
    optional_field("handoff_ns", &CP::handoff_ns)};
const auto core_median_fields = std::tuple{
    field("core", &CoreMedianRecord::core), field("compute_gflops", &CoreMedianRecord::compute_gflops),
    field("memory_gbps", &CoreMedianRecord::memory_gbps),
    optional_field("compute_spread", &CoreMedianRecord::compute_spread),
    optional_field("memory_spread", &CoreMedianRecord::memory_spread),
    optional_field("compute_threshold", &CoreMedianRecord::compute_threshold),
    optional_field("memory_threshold", &CoreMedianRecord::memory_threshold),
    optional_field("handoff_ns", &CoreMedianRecord::handoff_ns),
    optional_field("handoff_spread", &CoreMedianRecord::handoff_spread),
    optional_field("handoff_threshold", &CoreMedianRecord::handoff_threshold)};
const auto core_probes_fields = std::tuple{
    field("threshold", &CoreProbesRecord::threshold), field("probes", &CoreProbesRecord::probes),
    field("medians", &CoreProbesRecord::medians)};

using CL = CorePlacementRecord;
const auto core_placement_fields = std::tuple{
    field("core", &CL::core), field("partner", &CL::partner), field("handoff_ns_min", &CL::handoff_ns_min),
    field("handoff_ns_median", &CL::handoff_ns_median), field("handoff_ns_max", &CL::handoff_ns_max),
    field("apart", &CL::apart), field("moved", &CL::moved), optional_field("near_probes", &CL::near_probes),
    optional_field("far_probes", &CL::far_probes), field("message", &CL::message)};

// A config value as the text compare prints: strings bare, everything else as JSON.
std::string setting_text(const json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

}  // namespace

#define CNNBENCH_FIELDS_JSON(Record, fields)                                              \
  void to_json(json& out, const Record& r) {                                               \
    out = json::object();                                                                  \
    write_fields(out, r, fields);                                                          \
  }                                                                                        \
  void from_json(const json& in, Record& r) { read_fields(in, r, fields); }

CNNBENCH_FIELDS_JSON(Summary, summary_fields)
CNNBENCH_FIELDS_JSON(CoreSeriesRecord, core_series_fields)
CNNBENCH_FIELDS_JSON(CalibrationProbeRecord, calibration_probe_fields)
CNNBENCH_FIELDS_JSON(CalibrationRecord, calibration_fields)
CNNBENCH_FIELDS_JSON(AmdahlRecord, amdahl_fields)
CNNBENCH_FIELDS_JSON(PredictedStepRecord, predicted_step_fields)
CNNBENCH_FIELDS_JSON(MeasuredVsPredictedRecord, measured_vs_predicted_fields)
CNNBENCH_FIELDS_JSON(BeatenPoint, beaten_point_fields)
CNNBENCH_FIELDS_JSON(BaselineWarningRecord, baseline_warning_fields)
CNNBENCH_FIELDS_JSON(LaunchRecord, launch_fields)
CNNBENCH_FIELDS_JSON(RetryRecord, retry_fields)
CNNBENCH_FIELDS_JSON(SlowCoreWarningRecord, slow_core_fields)
CNNBENCH_FIELDS_JSON(CoreProbeRecord, core_probe_fields)
CNNBENCH_FIELDS_JSON(CoreMedianRecord, core_median_fields)
CNNBENCH_FIELDS_JSON(CorePlacementRecord, core_placement_fields)
#undef CNNBENCH_FIELDS_JSON

namespace {
const auto paired_fields = std::tuple{
    field("core", &PairedBaselineRecord::core), field("times_s", &PairedBaselineRecord::times_s),
    field("warmup_times_s", &PairedBaselineRecord::warmup_times_s),
    field("ratios", &PairedBaselineRecord::ratios),
    optional_field("steps", &PairedBaselineRecord::steps)};
const auto baseline_cores_fields = std::tuple{
    field("chosen", &BaselineCoresRecord::chosen), field("per_core", &BaselineCoresRecord::per_core)};
}  // namespace

void to_json(json& out, const PairedBaselineRecord& pair) {
  out = {{"meaning", "a serial repetition ran just before each of the point's repetitions; "
                     "speedup is the median of the pairs' time ratios"}};
  write_fields(out, pair, paired_fields);
}
void from_json(const json& in, PairedBaselineRecord& pair) { read_fields(in, pair, paired_fields); }

void to_json(json& out, const CoreProbesRecord& probes) {
  out = {{"meaning", "a fixed compute loop (GFLOP/s) and memory stream (GB/s) pinned to each core "
                     "in turn, and a cache line's round trip between each core and the first "
                     "(handoff_ns); probe k ran before round k"}};
  write_fields(out, probes, core_probes_fields);
}
void from_json(const json& in, CoreProbesRecord& probes) { read_fields(in, probes, core_probes_fields); }

void to_json(json& out, const BaselineCoresRecord& cores) {
  out = {{"meaning", "the baseline ran on each of these cores in turn; the fastest core's "
                     "repetitions are the point's times, so no speedup gains from a slow core"}};
  write_fields(out, cores, baseline_cores_fields);
}
void from_json(const json& in, BaselineCoresRecord& cores) { read_fields(in, cores, baseline_cores_fields); }

double PointRecord::images() const {
  if (!steps || !batch) return 0;
  const double images = static_cast<double>(*steps) * *batch;
  return images > 0 ? images : 0;
}

void to_json(json& out, const PointRecord& point) {
  out = json::object();
  write_fields(out, point, point_header);
  if (!point.measured()) {
    out["reason"] = point.reason;
    return;
  }
  write_fields(out, point, point_measured);
  if (point.speedup) write_fields(out, point, point_derived);
}

void from_json(const json& in, PointRecord& point) {
  read_fields(in, point, point_header);
  if (!in.contains("p")) point.p = point.cores * point.nodes;
  if (in.contains("reason")) read_value(in.at("reason"), point.reason);
  read_fields(in, point, point_measured);
  read_fields(in, point, point_derived);
}

void to_json(json& out, const ScalingPredictionRecord& s) {
  out = json::object();
  write_fields(out, s, prediction_common);
  if (!s.available) {
    out["reason"] = s.reason;
    return;
  }
  out["model_description"] =
      "T(p) = t_node * ceil(B/p)/B + 2(p-1) alpha + 2(p-1)/p * n * beta; S(p) = t_serial / T(p)";
  write_fields(out, s, prediction_available);
}

void from_json(const json& in, ScalingPredictionRecord& s) {
  read_fields(in, s, prediction_common);
  if (in.contains("reason")) read_value(in.at("reason"), s.reason);
  read_fields(in, s, prediction_available);
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
    if (p.status == "failed" || p.status == "diverged") failed.push_back(&p);
  }
  return failed;
}

void to_json(json& out, const SweepRecord& sweep) {
  out = {{"schema_version", sweep_schema_version}, {"kind", "sweep"}};
  write_fields(out, sweep, sweep_fields);
}

void from_json(const json& in, SweepRecord& sweep) { read_fields(in, sweep, sweep_fields); }

SweepRecord run_as_sweep(const json& run) {
  SweepRecord sweep;
  const json empty = json::object();
  sweep.context = run.value("context", empty);
  sweep.config = run.value("config", empty);
  const json metrics = run.value("metrics", empty);
  std::string model = "fc3";
  PointSpec spec;
  if (sweep.config.contains("model")) read_value(sweep.config.at("model"), model);
  if (sweep.config.contains("strategy")) read_value(sweep.config.at("strategy"), spec.strategy);
  if (sweep.config.contains("threads")) read_value(sweep.config.at("threads"), spec.cores);
  spec.model = parse_model(model);
  PointRecord point;
  point.id = spec.id();
  point.model = model;
  point.strategy = point.series = spec.strategy;
  point.cores = point.p = spec.cores;
  double seconds = 0;
  if (metrics.contains("train_seconds")) read_value(metrics.at("train_seconds"), seconds);
  point.times_s = {seconds};
  point.time = summarize(point.times_s);
  if (metrics.contains("steps")) read_value(metrics.at("steps"), point.steps);
  if (sweep.config.contains("batch")) read_value(sweep.config.at("batch"), point.batch);
  if (metrics.contains("interrupted")) read_value(metrics.at("interrupted"), sweep.interrupted);
  if (run.value("status", "ok") == "diverged") {
    point.status = "diverged";
    point.reason = run.value("reason", "diverged");
  }
  sweep.complete = !sweep.interrupted;
  sweep.points.push_back(point);
  return sweep;
}

SweepRecord as_sweep_record(const json& report) {
  return report.value("kind", "") == "run" ? run_as_sweep(report) : report.get<SweepRecord>();
}

std::vector<Setting> comparable_settings(const json& config) {
  std::vector<Setting> settings;
  if (!config.is_object()) return settings;
  const auto add = [&](const std::string& name, const json& object, const std::string& key) {
    const auto it = object.find(key);
    if (it == object.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty())) return;
    // A float setting stored at double precision (reports made before float_setting) reads as
    // the float it was.
    const bool float_setting_key = key == "lr" || key == "momentum" || key == "weight_decay";
    settings.push_back({name, float_setting_key && it->is_number_float()
                                  ? setting_text(float_setting(it->get<float>()))
                                  : setting_text(*it)});
  };
  for (const char* key : {"batch", "steps", "epochs", "lr", "momentum", "weight_decay", "warmup",
                          "pin", "isa"}) {
    add(key, config, key);
  }
  if (const auto data = config.find("data"); data != config.end() && data->is_object()) {
    add("data source", *data, "source");
    add("training samples", *data, "train_samples");
  }
  // A sweep records its strategy options at the top of config, a run under "options".
  const auto run_options = config.find("options");
  const json& options =
      run_options != config.end() && run_options->is_object() ? *run_options : config;
  for (const OptionSpec* spec : strategy_option_specs()) add(spec->name, options, spec->name);
  return settings;
}

}  // namespace cnnbench
