// The sweep as a whole: the plan, resuming a report, the ETA, the report rewritten after every
// point. How one point is measured is measure.cpp's.
#include "runner.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string_view>
#include <system_error>

#include "cnnbench/core.hpp"
#include "cnnbench/report.hpp"
#include "emulated_hosts.hpp"

namespace cnnbench {

using nlohmann::json;

std::string duration_text(double seconds) {
  const auto s = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s / 60 % 60);
  } else if (s >= 60) {
    std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  } else {
    std::snprintf(text, sizeof text, "%llds", s);
  }
  return text;
}

namespace {

constexpr std::string_view scratch_prefix = "cnnbench-sweep-";

// The scratch folders of sweeps that ended without removing theirs (killed with SIGKILL, as an
// out-of-memory kill or a CI timeout does): a folder named after a process that no longer exists
// goes. One whose process number was taken again by another process stays (it is small, and the
// next sweep after that process looks again).
void remove_stale_scratch(const std::filesystem::path& temp, bool quiet) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(temp, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(scratch_prefix, 0) != 0) continue;
    const std::string digits = name.substr(scratch_prefix.size());
    if (digits.empty() || digits.size() > 9 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    const auto pid = static_cast<pid_t>(std::stol(digits));
    if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code ignored;
    if (std::filesystem::remove_all(entry.path(), ignored) > 0 && !ignored && !quiet) {
      std::fprintf(stderr, "removed %s, the scratch folder of a sweep that is gone (process %d)\n",
                   printable_text(entry.path().string()).c_str(), static_cast<int>(pid));
    }
  }
}

}  // namespace

SweepRunner::SweepRunner(const SweepOptions& options)
    : options_(options),
      machine_cores_(std::max(1, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)))),
      launcher_(options, machine_cores_) {
  cores_ = options.cores;
  if (cores_.empty()) {
    for (int c = 1; c <= machine_cores_; ++c) cores_.push_back(c);
  }
  nodes_ = options.nodes;
  if (nodes_.empty()) {
    for (int n = 1; n <= std::min(4, machine_cores_); ++n) nodes_.push_back(n);
  }
  CNNBENCH_CHECK(options.repeat >= 1, "--repeat must be at least 1");
  CNNBENCH_CHECK(options.warmup >= 0, "--warmup must not be negative");
  CNNBENCH_CHECK(options.steps >= 0 || options.epochs > 0, "give --steps or --epochs");
  for (int c : cores_) CNNBENCH_CHECK(c >= 1, "--cores values must be at least 1");
  for (int n : nodes_) CNNBENCH_CHECK(n >= 1, "--nodes values must be at least 1");
  for (const auto& s : list_strategies()) available_[s.name] = s;
  for (const auto& peer : peer_strategy_names()) {
    available_[peer] = {.name = peer, .available = false, .reason = "runs only when named in --strategies",
                        .description = "", .options = {}};
  }
  for (const auto& s : options.strategies) {
    if (!available_.count(s)) {
      std::string known;
      for (const auto& [name, info] : available_) known += (known.empty() ? "" : ", ") + name;
      fail("--strategies: unknown strategy '" + s + "' (known: " + known + ")");
    }
  }
  const std::filesystem::path temp = std::filesystem::temp_directory_path();
  remove_stale_scratch(temp, options.quiet);
  scratch_ = temp / (std::string(scratch_prefix) + std::to_string(::getpid()));
  std::filesystem::create_directories(scratch_);
  // A peer asked for but not runnable here is skipped with the reason, as a gpu point without a
  // device is.
  for (const auto& s : options.strategies) {
    if (is_peer_strategy(s)) available_[s] = peer_strategy_info(s, options.python, scratch_);
  }
}

SweepRunner::~SweepRunner() {
  std::error_code ignored;
  std::filesystem::remove_all(scratch_, ignored);
}

SweepRecord SweepRunner::run() {
  load_data();
  // The cores the cluster points' ranks x threads must fit: under srun the allocation's; with a
  // hostfile its machines' (mpirun refuses a job beyond their slots); else this machine's.
  const int allocation_cpus = options_.launcher_kind == LauncherKind::srun ? slurm_allocation_cpus() : 0;
  const int cluster_cores = allocation_cpus > 0 ? allocation_cpus
                            : options_.hostfile ? std::numeric_limits<int>::max()
                                                : machine_cores_;
  std::vector<PointSpec> plan =
      options_.plan.empty() ? plan_points(options_, cores_, nodes_, cluster_cores) : options_.plan;
  if (options_.plan.empty()) add_tuned_points(plan, options_);
  // A launcher that cannot start jobs here fails the sweep before its first point, not hours later.
  const bool launches = available_.count("cluster") && available_.at("cluster").available &&
                        std::any_of(plan.begin(), plan.end(),
                                    [](const PointSpec& p) { return p.strategy == "cluster"; });
  if (launches) launcher_.check_usable();
  if (options_.trace_dir) check_trace_outputs(plan);
  report_ = SweepRecord{};
  report_.context = collect_context();
  report_.config = config_json();
  report_.features = build_features();
  if (options_.allreduce.is_object()) report_.allreduce = options_.allreduce;
  std::map<std::string, PointRecord> kept = resumed_points();
  if (!options_.quiet && options_.repeat < 3) {
    std::fprintf(stderr, "warning: --repeat %d: fewer than 3 repetitions give no spread worth the "
                         "name; use --repeat 3 or more\n", options_.repeat);
  }
  start_s_ = now_seconds();
  try {
    run_plan(plan, kept);
  } catch (const SweepInterrupted&) {
    report_.interrupted = true;
    if (!options_.quiet) {
      std::fprintf(stderr, "sweep interrupted: the report keeps the finished points, and those with "
                           "some rounds done marked with rounds_done (--resume measures them again)\n");
    }
  }
  collect_points();
  // Complete only when every point of the plan ran and none failed: a resumed run measures the
  // failed ones again.
  const std::size_t failed = report_.failed_points().size();
  report_.complete = !report_.interrupted && !rounds_cut_ && failed == 0;
  report_.elapsed_s = now_seconds() - start_s_;
  save();
  for (const auto& warning : {report_.pair_core_warning, report_.baseline_warning}) {
    if (!options_.quiet && warning) std::fprintf(stderr, "warning: %s\n", warning->message.c_str());
  }
  if (!options_.quiet && report_.core_placement) {
    std::fprintf(stderr, "%s: %s\n", report_.core_placement->moved ? "warning" : "note",
                 report_.core_placement->message.c_str());
  }
  if (!options_.quiet) {
    for (const PointRun& run : runs_) {
      if (!run.settled && run.prepared && !run.rounds.empty()) print_point(*report_.find_measured(run.spec.id()));
    }
    print_table();
    warn_noisy_points();
    warn_slow_cores();
  }
  if (!options_.quiet && failed > 0) {
    std::fprintf(stderr, "%zu point%s failed or diverged: the report is marked incomplete; --resume measures %s again\n",
                 failed, failed == 1 ? "" : "s", failed == 1 ? "it" : "them");
  }
  return report_;
}

// --trace-dir's files, one per point of the plan, before the first point: writable, none of them
// the report, and none already there unless --force or --resume (the report itself is checked
// before the sweep starts).
void SweepRunner::check_trace_outputs(const std::vector<PointSpec>& plan) const {
  std::vector<std::string> files;
  for (const PointSpec& point : plan) files.push_back(trace_file_name(point));
  const bool replace = options_.force || options_.resume;
  std::vector<OutputPath> outputs = {
      {.option = "--trace-dir", .path = *options_.trace_dir, .folder = true, .files = files, .replace = replace}};
  if (!options_.out.empty()) outputs.push_back({.option = "--out", .path = options_.out, .replace = true});
  check_outputs(outputs);
}

void SweepRunner::load_data() {
  if (options_.data_dir) {
    train_ = load_mnist(*options_.data_dir, Split::train);
  } else {
    CNNBENCH_CHECK(options_.synthetic_samples > 0, "--synthetic must be positive");
    train_ = make_synthetic(options_.synthetic_samples, options_.seed);
  }
}

std::string SweepRunner::sweep_option(const OptionSpec& spec) const {
  const auto it = options_.options.find(spec.name);
  return it != options_.options.end() ? it->second : spec.sweep_default;
}

// The sweep's strategy options as the report records them: every option the sweep passes on,
// "" (0 for a whole number) when not given and without a sweep default.
json SweepRunner::options_json() const {
  json out = json::object();
  for (const OptionSpec* spec : strategy_option_specs()) {
    if (!spec->in_sweep) continue;
    const std::string value = sweep_option(*spec);
    if (spec->kind == OptionKind::whole_number) {
      out[spec->name] = value.empty() ? 0 : std::stoi(value);
    } else {
      out[spec->name] = value;
    }
  }
  return out;
}

json SweepRunner::config_json() const {
  std::vector<std::string> models;
  for (ModelKind m : options_.models) models.push_back(model_name(m));
  std::vector<std::string> strategies = options_.strategies;
  if (strategies.empty()) {
    for (const auto& s : list_strategies()) strategies.push_back(s.name);
  }
  json data = {{"source", options_.data_dir ? "mnist" : "synthetic"}, {"train_samples", train_.count}};
  if (options_.data_dir) data["dir"] = options_.data_dir->string();
  json config = {{"models", models},
          {"strategies", strategies},
          {"cores", cores_},
          {"nodes", nodes_},
          {"repeat", options_.repeat},
          {"order", "rounds"},
          {"warmup", options_.warmup},
          {"steps", options_.min_time > 0 ? json(nullptr) : json(options_.steps)},
          {"min_time_s", options_.min_time > 0 ? json(options_.min_time) : json(nullptr)},
          {"epochs", options_.steps >= 0 ? json(nullptr) : json(options_.epochs)},
          {"batch", options_.batch},
          {"lr", float_setting(options_.lr)},
          {"momentum", float_setting(options_.momentum)},
          {"seed", options_.seed},
          {"pin", options_.pin},
          {"isa", options_.isa},
          {"data", data},
          {"target_accuracy", options_.target_accuracy ? json(*options_.target_accuracy) : json(nullptr)},
          {"eval_every", options_.eval_every},
          {"tta_max_steps", options_.tta_max_steps},
          {"machine_cores", machine_cores_},
          {"launcher",
           {{"kind", launcher_kind_name(options_.launcher_kind)},
            {"command", options_.launcher},
            {"args", options_.launcher_args},
            {"hostfile", options_.hostfile ? json(options_.hostfile->string()) : json(nullptr)}}}};
  if (options_.shards != 1) config["shards"] = options_.shards;  // absent: the unsharded order
  config.update(options_json());
  if (!options_.network.is_null()) config["network"] = options_.network;
  // sweep --tuned: the tunes whose winners the sweep measured beside their defaults.
  if (!options_.tuned.empty()) {
    json tuned = json::array();
    for (const TunedSettings& t : options_.tuned) {
      const json& c = t.report.at("config");
      const json& context = t.report.value("context", json::object());
      tuned.push_back({{"file", t.file.string()}, {"model", c.at("model")}, {"cores", c.at("cores")},
                       {"nodes", c.at("nodes")}, {"date", context.value("date", json())},
                       {"cpu", context.value("cpu", json())}});
    }
    config["tuned"] = tuned;
  }
  return config;
}

// With --resume, the finished points of the existing report, after checking it was made with
// the same settings (launcher and machine aside).
std::map<std::string, PointRecord> SweepRunner::resumed_points() {
  std::map<std::string, PointRecord> kept;
  if (!options_.resume || !std::filesystem::exists(options_.out)) return kept;
  const SweepRecord old = read_report(options_.out).get<SweepRecord>();
  json old_config = old.config, new_config = report_.config;
  for (json* c : {&old_config, &new_config}) {
    c->erase("launcher");
    c->erase("machine_cores");
  }
  // Reports made before float_setting hold the float settings at double precision.
  for (const char* key : {"lr", "momentum"}) {
    if (old_config.contains(key) && old_config.at(key).is_number_float()) {
      old_config[key] = float_setting(old_config.at(key).get<float>());
    }
  }
  for (auto it = new_config.begin(); it != new_config.end(); ++it) {
    if (!old_config.contains(it.key()) || old_config.at(it.key()) != it.value()) {
      fail("--resume: " + options_.out.string() + " was made with a different " + it.key() + " (" +
           (old_config.contains(it.key()) ? old_config.at(it.key()).dump() : "none") + ", now " +
           it.value().dump() + "); pass the same flags or drop --resume");
    }
  }
  for (const PointRecord& p : old.points) {
    // A point stopped before its last round is measured again, from its preparation on: its
    // repetitions would otherwise span two runs of the sweep.
    if (p.status != "failed" && p.status != "diverged" && !p.rounds_done) kept[p.id] = p;
  }
  if (old.allreduce.is_object()) report_.allreduce = old.allreduce;
  if (!options_.quiet) {
    std::fprintf(stderr, "resuming %s: %zu finished points kept\n", options_.out.c_str(), kept.size());
  }
  return kept;
}

// One run of the point, in FLOP-equivalents: a launcher's or an interpreter's start counts 2e8.
double SweepRunner::repetition_cost(const PointSpec& p) const {
  const auto run_cost = [&](const PointSpec& q) {
    const double launch = q.strategy == "cluster" || is_peer_strategy(q.strategy) ? 2e8 : 0.0;
    return model_spec(q.model).train_flops_per_image * options_.batch + launch;
  };
  // A point's repetition comes with its paired serial one; the baseline runs on each of its cores.
  if (p.strategy == "serial") return static_cast<double>(baseline_cores(p).size()) * run_cost(p);
  return run_cost(p) + run_cost(PointSpec{p.model, "serial", 1, 1});
}

double SweepRunner::preparation_cost(const PointSpec& p) const {
  // Calibration's probes come to about three repetitions.
  const double runs = options_.warmup + (options_.min_time > 0 ? 3 : 0) + (options_.target_accuracy ? 3 : 0) +
                      (options_.trace_dir ? 1 : 0);
  return runs * repetition_cost(p);
}

// Every point's throughput, its speedup over our serial and its ratio to PyTorch on one thread
// ("-" where there is none), the PyTorch peers marked.
void SweepRunner::print_table() const {
  std::fprintf(stderr, "%-31s %10s %8s %14s\n", "point", "images/s", "speedup", "vs PyTorch 1t");
  // A pointer, not an optional: GCC's -O1 sanitizer builds took a copied optional's value for
  // uninitialized.
  const auto number = [](const double* value, const char* format) {
    char text[32] = "-";
    if (value != nullptr) std::snprintf(text, sizeof text, format, *value);
    return std::string(text);
  };
  const auto of = [](const std::optional<double>& value) { return value ? &*value : nullptr; };
  for (const PointRecord& p : report_.points) {
    const std::string name = p.id + (p.peer.value_or(false) ? " (peer)" : "");
    if (!p.measured()) {
      std::fprintf(stderr, "%-31s %s\n", name.c_str(), p.status.c_str());
      continue;
    }
    const double* rate = p.images_per_s ? &p.images_per_s->median : nullptr;
    std::fprintf(stderr, "%-31s %10s %8s %14s\n", name.c_str(), number(rate, "%.0f").c_str(),
                 number(of(p.speedup), "%.2f").c_str(), number(of(p.vs_pytorch_1thread), "%.2f").c_str());
  }
  // sweep --tuned: each winner against its default, both measured in these rounds.
  for (const PointRecord& p : report_.points) {
    if (!p.tuned.is_object()) continue;
    const std::string label = printable_text(p.tuned.value("label", ""));
    if (p.tuned.value("default", false)) {
      std::fprintf(stderr, "tuned %s: the default (%s) is the tune's winner\n", p.id.c_str(), label.c_str());
      continue;
    }
    const PointRecord* of_default = report_.find_measured(p.tuned.value("default_point", ""));
    std::fprintf(stderr, "tuned %s: %s, speedup %s against the default's %s (%s)\n", p.id.c_str(), label.c_str(),
                 p.measured() ? number(of(p.speedup), "%.2f").c_str() : p.status.c_str(),
                 of_default ? number(of(of_default->speedup), "%.2f").c_str() : "-",
                 printable_text(p.tuned.value("default_point", "")).c_str());
  }
}

// The closing summary names the points whose workers lost time to descheduling, so that a reader
// of the last lines knows which numbers to retake on a quiet machine.
void SweepRunner::warn_noisy_points() const {
  std::string noisy;
  for (const PointRecord& p : report_.points) {
    if (p.noise_warning) noisy += (noisy.empty() ? "" : ", ") + p.id;
  }
  if (noisy.empty()) return;
  std::fprintf(stderr, "warning: noisy points (a worker lost over %.0f%% of its wall time to descheduling; "
                       "points[].noise_warning): %s\n", 100 * descheduled_warning_fraction, noisy.c_str());
}

// Repetitions shorter than this are dominated by timer resolution, thread start-up and noise.
constexpr double short_repetition_s = 0.1;

void SweepRunner::print_point(const PointRecord& p) const {
  std::fprintf(stderr, "%-22s median %.3f s", p.id.c_str(), p.time.median);
  // One repetition has no spread to show.
  if (p.times_s.size() >= 2) std::fprintf(stderr, " (MAD %.3f)", p.time.mad);
  if (p.images_per_s) std::fprintf(stderr, ", %.0f images/s", p.images_per_s->median);
  if (p.speedup) {
    // Paired: the median of serial/point ratios of repetitions taken in turn, which need not
    // equal the ratio of the medians (nor of images/s).
    const bool paired = p.paired_baseline && !p.paired_baseline->ratios.empty();
    std::fprintf(stderr, ", %s %.2f", paired ? "paired speedup" : "speedup", *p.speedup);
    if (paired && p.paired_baseline->ratios.size() >= 2) {
      const auto [low, high] = std::minmax_element(p.paired_baseline->ratios.begin(), p.paired_baseline->ratios.end());
      std::fprintf(stderr, " (%.2f-%.2f)", *low, *high);
    }
  }
  if (p.prediction.is_object()) {
    std::fprintf(stderr, ", model %+.0f%%", 100 * p.prediction["relative_error"].get<double>());
  }
  const json& tta = p.time_to_accuracy;
  if (tta.is_object() && tta.value("reached", false)) {
    std::fprintf(stderr, ", %.1f s to %.0f%%", tta["seconds"].get<double>(), 100 * tta["target"].get<double>());
  }
  if (p.rounds_done) std::fprintf(stderr, ", %d of %d rounds", *p.rounds_done, options_.repeat);
  if (p.noise_warning) std::fprintf(stderr, ", NOISY");
  if (p.spread_warning) std::fprintf(stderr, ", WIDE");
  if (!p.slow_core_warnings.empty()) std::fprintf(stderr, ", SLOW CORE");
  std::fprintf(stderr, "\n");
  if (p.noise_warning) {
    std::fprintf(stderr, "    warning: %s: its times measure the machine's load as much as the strategy\n",
                 p.noise_warning->c_str());
  }
  if (p.spread_warning) std::fprintf(stderr, "    warning: %s\n", p.spread_warning->c_str());
  if (p.time.median < short_repetition_s) {
    std::fprintf(stderr, "    warning: a repetition takes %.0f ms, under %.0f ms: too short to time "
                         "reliably; raise --steps, or leave it out to calibrate to --min-time\n",
                 1e3 * p.time.median, 1e3 * short_repetition_s);
  }
}

// The closing summary names every repetition that ran on a slow core, the core, how much slower
// and in what (compute, memory or its handoff with core 0), and whether its retry stands in for it.
void SweepRunner::warn_slow_cores() const {
  bool first = true;
  for (const PointRecord& p : report_.points) {
    for (const SlowCoreWarningRecord& w : p.slow_core_warnings) {
      if (first) {
        std::fprintf(stderr, "warning: repetitions that ran while a core was slow: a probe of it more than "
                             "%.0f%%, or %.0f times its probes' spread, below its median (points[].slow_core_warnings, "
                             "core_probes.medians):\n", 100 * slow_core_threshold, slow_core_spreads);
        first = false;
      }
      const std::string series = w.series_core ? " on core " + std::to_string(*w.series_core) : "";
      const char* outcome = !w.retry ? "not retried"
                            : w.used == "retry" ? "retried; the retry is kept"
                                                : "retried, but its cores were slow again: the original is kept";
      std::fprintf(stderr, "    %s%s: %s; %s\n", p.id.c_str(), series.c_str(), w.message.c_str(), outcome);
    }
  }
}

void SweepRunner::save() const {
  if (!options_.out.empty()) write_json(options_.out, report_);
}

SweepRecord run_sweep(const SweepOptions& options) {
  if (options.emulated_hosts <= 0) {
    SweepRunner runner(options);
    return runner.run();
  }
  // Up for the whole sweep, down when it ends in any way (an interrupted or failed one too).
  const EmulatedHosts hosts(options.emulated_hosts, options.link_rate);
  SweepOptions over_hosts = options;
  over_hosts.launcher = hosts.mpirun().string();
  over_hosts.network = hosts.record();
  SweepRunner runner(over_hosts);
  return runner.run();
}

}  // namespace cnnbench
