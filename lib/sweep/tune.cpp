// `cnnbench tune`: profile the step once, predict every candidate (tune_plan.cpp), measure the
// most promising as a sweep of exactly those points with their paired serial baseline, and pick
// each strategy's winner from the measurements (docs/tune.md).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>

#include <unistd.h>

#include "cnnbench/cluster_prediction.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/sweep.hpp"
#include "cnnbench/train.hpp"
#include "cnnbench/tune.hpp"
#include "../strategies/strategy_options.hpp"
#include "emulated_hosts.hpp"
#include "launcher.hpp"
#include "runner.hpp"
#include "subprocess.hpp"

namespace cnnbench {

using nlohmann::json;

namespace {

// A profile run is this long at least: per-layer times of shorter runs swing with one interrupt.
constexpr double profile_run_s = 0.25;
// What one repetition costs beyond its steps: mpirun's start for a launched cluster point, the
// stream's graph and its profiling of the actors for an in-process one (seconds, for the budget).
constexpr double launch_s = 0.5, in_process_start_s = 0.05;
// allreduce-bench on 2 ranks, which the sweep runs before its first cluster point and again
// after the rounds (where its deadline leaves the time).
constexpr double allreduce_bench_s = 10;

TrainConfig base_config(const TuneOptions& o, const std::string& strategy, int threads) {
  TrainConfig config;
  config.model = o.model;
  config.strategy = strategy;
  config.batch = o.batch;
  config.sgd.lr = o.lr;
  config.sgd.momentum = o.momentum;
  config.seed = o.seed;
  config.threads = threads;
  config.pin = o.pin;
  return config;
}

class Profiler {
 public:
  Profiler(const TuneOptions& o, const Dataset& train) : o_(o), train_(train) {}

  // One in-process run of `config` long enough to time: its seconds per step and breakdown.
  RunResult run(TrainConfig config, double step_guess_s) {
    config.steps = std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil(profile_run_s / step_guess_s)), 20, 20000);
    RunOptions run_options;
    run_options.stop_requested = o_.stop_requested;
    RunResult result = run_training(config, train_, run_options);
    if (result.interrupted) throw SweepInterrupted{};
    CNNBENCH_CHECK(result.steps_run > 0 && result.train_seconds > 0,
                   "tune: the profile run of " + config.strategy + " took no measurable time");
    return result;
  }

  BatchProfile serial_at(int batch, double step_guess_s) {
    TrainConfig config = base_config(o_, "serial", 1);
    config.batch = batch;
    const RunResult r = run(config, step_guess_s);
    const TimeBreakdown& t = r.time_breakdown;
    CNNBENCH_CHECK(t.measured(), "tune: serial measured no time breakdown");
    const auto steps = static_cast<double>(t.steps);
    BatchProfile p;
    p.batch = batch;
    for (std::size_t l = 0; l < t.layer_names.size() && l < max_timed_layers; ++l) {
      p.layer_s[t.layer_names[l]] = t.critical_path.layer_seconds[l] / steps;
    }
    p.data_s = t.critical_path[TimeCategory::data] / steps;
    p.update_s = t.critical_path[TimeCategory::update] / steps;
    p.step_s = r.train_seconds / static_cast<double>(r.steps_run);
    return p;
  }

  double step_of(const TrainConfig& config, double step_guess_s) {
    const RunResult r = run(config, step_guess_s);
    return r.train_seconds / static_cast<double>(r.steps_run);
  }

 private:
  const TuneOptions& o_;
  const Dataset& train_;
};

// Bytes per second of copying a token-sized buffer that stays in cache, the best of a few tries.
double copy_rate() {
  // Both buffers start on a cache line, as the stream's channel slots do (stream_channel.cpp), and
  // the same distance past a 4 KiB page: glibc's memcpy of a few KiB and more runs at a tenth of
  // its speed when the destination lies a few bytes past the source modulo 4 KiB, which two heap
  // buffers may (where they land depends on what ran before), and the rate would then measure the heap.
  constexpr std::size_t count = 64 * 1024;
  aligned_vector<float> block(2 * count, 1.0f);
  float* from = block.data();
  float* to = from + count;
  double best = 0;
  for (int trial = 0; trial < 5; ++trial) {
    const double start = now_seconds();
    for (std::size_t k = 0; k < 64; ++k) {
      std::memcpy(to, from, count * sizeof(float));
      from[k] = to[k + 1];
    }
    const double seconds = now_seconds() - start;
    if (seconds > 0) best = std::max(best, 64.0 * static_cast<double>(count * sizeof(float)) / seconds);
  }
  return best > 0 ? best : 1e10;
}

bool wants(const TuneOptions& o, const std::string& strategy) {
  return std::find(o.strategies.begin(), o.strategies.end(), strategy) != o.strategies.end();
}

// A job of the profile in a process of its own, in a temporary folder it leaves behind: `args`
// of the folder's report path (the job writes its JSON report there). The report, null when the
// job failed or wrote none, and the log's last line (its error).
struct JobReport {
  json report;
  std::string why;
};
JobReport run_profile_job(const TuneOptions& o, const std::string& name,
                          const std::function<std::vector<std::string>(const std::filesystem::path&)>& args) {
  const std::filesystem::path folder = std::filesystem::temp_directory_path() /
                                       ("cnnbench-tune-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(folder);
  const int code = run_logged(args(folder / "report.json"), folder / "job.log", o.stop_requested);
  JobReport out;
  out.why = last_line(folder / "job.log");
  if (code == 0) out.report = json::parse(read_file(folder / "report.json"), nullptr, false);
  if (out.report.is_discarded()) out.report = nullptr;
  std::error_code ignored;
  std::filesystem::remove_all(folder, ignored);
  if (o.stop_requested && o.stop_requested()) throw SweepInterrupted{};
  return out;
}

// One run of the cluster strategy, in a process of its own: a cluster run here would initialise
// MPI in this process, and the mpirun of the measured cluster points would then inherit its
// singleton's environment. Its report's metrics.
json cluster_profile_run(const TuneOptions& o, const TuneCandidate& candidate, std::int64_t steps) {
  const JobReport run = run_profile_job(o, "cluster", [&](const std::filesystem::path& report) {
    std::vector<std::string> args = tune_command(o, candidate, steps);
    args[0] = o.self.string();
    args.insert(args.end(), {"--quiet", "--report", report.string()});
    return args;
  });
  CNNBENCH_CHECK(run.report.is_object() && run.report.contains("metrics"),
                 "tune: the cluster's profile run on " + std::to_string(candidate.cores) +
                     " thread(s) failed: " + run.why);
  return run.report.at("metrics");
}

// allreduce-bench of the strategy's own call over the tune's hosts (launcher_options' mpirun):
// the report, which the tune's sweep keeps as its own, and the link its fit inverts.
json measure_link(const TuneOptions& o, const SweepOptions& launcher_options, int machine_cores,
                  TuneProfile& p) {
  const Launcher launcher(launcher_options, machine_cores);
  std::vector<std::string> args;
  JobReport bench = run_profile_job(o, "link", [&](const std::filesystem::path& report) {
    args = launcher.allreduce_bench(p.nodes, report);
    return args;
  });
  if (bench.report.is_object()) p.link = allreduce_report_link(bench.report);
  CNNBENCH_CHECK(p.link.has_value(), "tune: allreduce-bench over the " + std::to_string(p.nodes) +
                                         " hosts failed: " + bench.why);
  bench.report["launch"] = launcher.record(args);
  return bench.report;
}

TuneProfile profile_step(const TuneOptions& o, const Dataset& train,
                         const std::vector<TuneCandidate>& candidates) {
  Profiler profiler(o, train);
  TuneProfile p;
  p.model = o.model;
  p.batch = o.batch;
  p.cores = o.cores;
  p.nodes = std::max(1, o.emulated_hosts);
  // A first short run warms the caches and the kernels' choice and gives the step's scale.
  TrainConfig warm = base_config(o, "serial", 1);
  warm.steps = 10;
  double guess = profiler.run(warm, 1e9).train_seconds / 20;
  for (int b : tune_profile_batches(candidates, o.batch)) {
    p.serial.push_back(profiler.serial_at(b, guess * b / o.batch));
  }
  const double serial_step = p.full_batch().step_s;
  p.copy_bytes_per_s = copy_rate();
  if (wants(o, "stream")) {
    // The paper's graph on one core in one micro-batch and in several: what more firings of the
    // same samples cost, and what the step costs beyond that.
    const auto graph_step = [&](int microbatches) {
      TrainConfig config = base_config(o, "stream", 1);
      config.options = stream_profile_graph(o.model, microbatches).options;
      return profiler.step_of(config, serial_step);
    };
    const int m = stream_profile_microbatches(o.batch);
    const double step_1 = graph_step(1);
    const StreamCosts costs = stream_costs(p, step_1, m, m > 1 ? graph_step(m) : step_1);
    p.stream_firing_s = costs.firing_s;
    p.stream_fixed_s = costs.fixed_s;
  }
  if (wants(o, "cluster")) {
    TuneCandidate one;
    one.strategy = "cluster";
    const std::int64_t steps = std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil(profile_run_s / serial_step)), 20, 20000);
    const json metrics = cluster_profile_run(o, one, steps);
    const double n = metrics.at("steps").get<double>();
    const BatchProfile& full = p.full_batch();
    double work = full.data_s;
    for (const auto& [layer, seconds] : full.layer_s) work += seconds;
    const json& breakdown = metrics.value("time_breakdown", json());
    p.cluster_update_s = breakdown.is_object() ? breakdown.at("update_s").get<double>() / n : full.update_s;
    p.cluster_fixed_s = std::max(0.0, metrics.at("train_seconds").get<double>() / n - work - p.cluster_update_s);
    if (o.cores > 1) {
      // The cluster's default on every core: what its threads cost each other beyond the
      // one-core profile.
      TuneCandidate all;
      all.strategy = "cluster";
      all.cores = o.cores;
      const json on_all = cluster_profile_run(o, all, steps);
      p.cross_core_s = cross_core_seconds(
          p, on_all.at("train_seconds").get<double>() / on_all.at("steps").get<double>());
    }
  }
  if (wants(o, "blas")) {
    p.blas_step_1_s = profiler.step_of(base_config(o, "blas", 1), serial_step);
    p.blas_step_p_s = o.cores > 1 ? profiler.step_of(base_config(o, "blas", o.cores), serial_step) : p.blas_step_1_s;
  }
  return p;
}

json profile_json(const TuneProfile& p, double seconds) {
  json serial = json::array();
  for (const BatchProfile& b : p.serial) {
    serial.push_back({{"batch", b.batch}, {"step_s", b.step_s}, {"layer_s", b.layer_s},
                      {"data_s", b.data_s}, {"update_s", b.update_s}, {"rest_s", b.rest_s()}});
  }
  return {{"seconds", seconds},
          {"serial", serial},
          {"stream_firing_s", p.stream_firing_s},
          {"stream_fixed_s", p.stream_fixed_s},
          {"copy_bytes_per_s", p.copy_bytes_per_s},
          {"cluster_update_s", p.cluster_update_s},
          {"cluster_fixed_s", p.cluster_fixed_s},
          {"cross_core_s", p.cross_core_s},
          {"blas_step_1_s", p.blas_step_1_s},
          {"blas_step_p_s", p.blas_step_p_s},
          {"nodes", p.nodes},
          {"machine_cores", p.machine_cores},
          {"token_bucket", p.token_bucket ? json{{"burst_bytes", p.token_bucket->burst_bytes},
                                                 {"rate_bytes_per_s", p.token_bucket->rate_bytes_per_s}}
                                          : json(nullptr)},
          {"link", p.link ? json{{"alpha_s", p.link->link.alpha_s}, {"beta_s_per_byte", p.link->link.beta_s_per_byte},
                                 {"gamma_s_per_byte", p.link->gamma_s_per_byte}}
                          : json(nullptr)}};
}

json candidate_json(const TuneCandidate& c) {
  return {{"strategy", c.strategy}, {"cores", c.cores}, {"nodes", c.nodes}, {"label", c.label},
          {"options", c.options}, {"default", c.is_default}, {"predicted_step_s", c.predicted_step_s},
          {"bound", c.bound}};
}

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace

std::vector<std::string> tune_command(const TuneOptions& o, const TuneCandidate& c, std::int64_t steps) {
  TrainConfig config = base_config(o, c.strategy, c.cores);
  config.steps = steps;
  // The sweep's own defaults of the options it passes on (balance dynamic), then the candidate's.
  for (const OptionSpec* spec : strategy_option_specs()) {
    if (spec->in_sweep && spec->applies_to(c.strategy) && !spec->sweep_default.empty()) {
      config.options[spec->name] = spec->sweep_default;
    }
  }
  for (const auto& [name, value] : c.options) config.options[name] = value;
  // Over emulated hosts the ranks start through the set's mpirun (scripts/emulate-hosts.sh up N
  // puts it in build/emulated-hosts unless given --dir).
  std::vector<std::string> words;
  if (c.nodes > 1) {
    words = {"build/emulated-hosts/mpirun", "-np", std::to_string(c.nodes), "--bind-to", "none"};
  }
  words.insert(words.end(), {"cnnbench", "train"});
  for (std::string& word : to_argv(config)) words.push_back(std::move(word));
  if (o.data_dir) {
    words.insert(words.end(), {"--data", o.data_dir->string()});
  } else {
    words.insert(words.end(), {"--synthetic", std::to_string(o.synthetic_samples)});
  }
  if (o.isa != "best") words.insert(words.end(), {"--isa", o.isa});
  return words;
}

namespace {

// Whether candidate `m` measured faster than the default `d`. Where both ran in the same
// rounds, at least tune_rounds_to_judge of them: faster in every one of those rounds, each
// round's two paired speedups side by side (a drift of the machine over minutes moves both
// alike, so a gain smaller than the drift is still seen; a candidate no faster than the default
// wins every one of 4 rounds by luck 1 time in 16). Else each of its paired speedups above the
// default's median (a gain larger than the spread of the rounds).
bool clears_default(const json& m, const json& d) {
  const json& mine = m.value("speedup_by_round", json());
  const json& theirs = d.value("speedup_by_round", json());
  if (mine.is_object() && theirs.is_object()) {
    int common = 0;
    bool faster_in_each = true;
    for (const auto& [round, ratio] : mine.items()) {
      if (!theirs.contains(round)) continue;
      ++common;
      faster_in_each = faster_in_each && ratio.get<double>() > theirs.at(round).get<double>();
    }
    if (common >= tune_rounds_to_judge) return faster_in_each;
  }
  return m.contains("speedup_range") && m.at("speedup_range")[0].get<double>() > d.at("speedup").get<double>();
}

}  // namespace

json tune_winners(const json& measured, const std::vector<std::string>& strategies) {
  json winners = json::object();
  for (const std::string& strategy : strategies) {
    const json* fallback = nullptr;
    for (const json& m : measured) {
      if (m.at("strategy") == strategy && m.at("status") == "ok" && m.at("default").get<bool>()) fallback = &m;
    }
    const json* best = nullptr;  // the highest of the candidates that clear the default
    for (const json& m : measured) {
      if (m.at("strategy") != strategy || m.at("status") != "ok" || &m == fallback) continue;
      const bool clears = fallback == nullptr || clears_default(m, *fallback);
      if (clears && (best == nullptr || m.at("speedup").get<double>() > best->at("speedup").get<double>())) best = &m;
    }
    if (best == nullptr) best = fallback;
    if (best == nullptr) {
      winners[strategy] = nullptr;
      continue;
    }
    json w = {{"id", best->at("id")}, {"label", best->at("label")}, {"options", best->at("options")},
              {"cores", best->at("cores")}, {"nodes", best->at("nodes")},
              {"default", best->at("default")}, {"speedup", best->at("speedup")},
              {"measured_step_s", best->at("measured_step_s")}, {"command", best->at("command")}};
    w["default_speedup"] = fallback ? fallback->at("speedup") : json(nullptr);
    winners[strategy] = w;
  }
  return winners;
}

json run_tune(const TuneOptions& options) {
  const double start = now_seconds();
  // Emulated hosts are up for the whole tune (the link's profile and the measured points) and
  // down when it ends in any way; the cluster's jobs start through their mpirun.
  std::optional<EmulatedHosts> hosts;
  TuneOptions o = options;
  json network;
  if (o.emulated_hosts > 0) {
    hosts.emplace(o.emulated_hosts, o.link_rate);
    o.launcher = hosts->mpirun().string();
    o.launcher_args.clear();
    network = hosts->record();
  }
  const int nodes = std::max(1, o.emulated_hosts);
  const int machine_cores = std::max(1, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
  const auto say = [&o](const std::string& line) {
    if (!o.quiet) std::fprintf(stderr, "%s\n", printable_text(line).c_str());
  };
  const Dataset train = o.data_dir ? load_mnist(*o.data_dir, Split::train) : make_synthetic(o.synthetic_samples, o.seed);
  std::vector<TuneCandidate> candidates;
  for (const std::string& strategy : o.strategies) {
    for (TuneCandidate& c : tune_candidates(o.model, strategy, o.cores, o.batch, nodes)) candidates.push_back(std::move(c));
  }
  say("profiling " + std::string(model_name(o.model)) + " on " + std::to_string(o.cores) + " cores" +
      (nodes > 1 ? " a host, " + std::to_string(nodes) + " emulated hosts" + (o.link_rate.empty() ? "" : " at " + o.link_rate) : ""));
  json report = {{"schema_version", tune_schema_version}, {"kind", "tune"}, {"interrupted", false}};
  report["context"] = collect_context();
  TuneProfile profile;
  SweepOptions link_options;  // the hosts' mpirun, for the link's allreduce-bench
  link_options.launcher = o.launcher;
  link_options.self = o.self;
  json link_report;
  try {
    profile = profile_step(o, train, candidates);
    if (nodes > 1) {
      profile.machine_cores = machine_cores;
      link_report = measure_link(o, link_options, machine_cores, profile);
      if (const std::optional<double> bits = parse_tc_rate(o.link_rate)) {
        profile.token_bucket = TokenBucket{tbf_burst_bytes(*bits), *bits / 8};
      }
    }
  } catch (const SweepInterrupted&) {
    report["interrupted"] = true;
    return report;
  }
  const double profiled_s = now_seconds() - start;
  for (TuneCandidate& c : candidates) predict_step(profile, c);
  report["profile"] = profile_json(profile, profiled_s);

  // Steps per repetition: the fastest candidate's repetition still takes --min-time.
  const double serial_step = profile.full_batch().step_s;
  double fastest = serial_step;
  for (const TuneCandidate& c : candidates) fastest = std::min(fastest, std::max(1e-6, c.predicted_step_s));
  const auto steps = std::max<std::int64_t>(10, static_cast<std::int64_t>(std::ceil(o.min_time / fastest)));
  const int runs = o.warmup + o.repeat;
  const auto cost = [&](const TuneCandidate& c) {
    const double start_s = c.strategy == "cluster" ? launch_s : in_process_start_s;
    // A candidate is costed at serial's step at least: the planner errs fast (docs/tune.md).
    return runs * (static_cast<double>(steps) * (std::max(c.predicted_step_s, serial_step) + serial_step) + start_s);
  };
  // The serial baseline runs on two cores in every round, and the probes between rounds.
  double fixed = runs * 2.0 * static_cast<double>(steps) * serial_step + 0.5 * (o.repeat + 1);
  if (wants(o, "cluster") && nodes == 1) fixed += allreduce_bench_s;  // over hosts: in the profile
  const double left = o.budget_s - profiled_s - fixed;
  std::vector<std::size_t> chosen;
  if (o.exhaustive) {
    for (std::size_t i = 0; i < candidates.size(); ++i) chosen.push_back(i);
  } else {
    chosen = choose_measured(candidates, cost, left);
  }
  double planned = fixed;
  for (std::size_t i : chosen) planned += cost(candidates[i]);
  say("profiled in " + duration_text(profiled_s) + "; " + std::to_string(candidates.size()) +
      " candidates predicted, measuring " + std::to_string(chosen.size()) + " (about " +
      duration_text(planned) + (o.exhaustive ? ", every one: --exhaustive)" : " of the " + duration_text(o.budget_s) + " budget)"));
  if (!o.exhaustive && profiled_s + planned > o.budget_s) {
    say("warning: the budget is too small for each strategy's default and predicted best; "
        "measuring them anyway");
  }

  SweepOptions s;
  s.models = {o.model};
  s.strategies = o.strategies;
  s.cores = {o.cores};
  s.nodes = {nodes};
  s.network = network;
  s.allreduce = link_report;
  s.repeat = o.repeat;
  s.warmup = o.warmup;
  s.steps = steps;
  s.min_time = 0;
  s.batch = o.batch;
  s.lr = o.lr;
  s.momentum = o.momentum;
  s.seed = o.seed;
  s.pin = o.pin;
  s.isa = o.isa;
  s.data_dir = o.data_dir;
  s.synthetic_samples = o.synthetic_samples;
  s.launcher = o.launcher;
  s.launcher_args = o.launcher_args;
  s.self = o.self;
  s.quiet = o.quiet;
  s.stop_requested = o.stop_requested;
  // The budget holds for the rounds: none starts that would end after it (the first always runs).
  if (!o.exhaustive) s.deadline_s = start + o.budget_s;
  s.plan.emplace_back(o.model, "serial", 1, 1);
  for (std::size_t k = 0; k < chosen.size(); ++k) {
    const TuneCandidate& c = candidates[chosen[k]];
    PointSpec point(o.model, c.strategy, c.cores, c.nodes);
    point.options = c.options;
    point.variant = "t" + std::to_string(k + 1);
    s.plan.push_back(std::move(point));
  }
  const SweepRecord sweep = run_sweep(s);

  json measured = json::array(), all = json::array();
  std::vector<double> errors;
  for (const TuneCandidate& c : candidates) all.push_back(candidate_json(c));
  const PointRecord* serial = sweep.find_measured(s.plan.front().id());
  for (std::size_t k = 0; k < chosen.size(); ++k) {
    const TuneCandidate& c = candidates[chosen[k]];
    const std::string id = s.plan[k + 1].id();
    all[chosen[k]]["id"] = id;
    json entry = candidate_json(c);
    entry["id"] = id;
    entry["command"] = tune_command(o, c, steps);
    const PointRecord* point = sweep.find_measured(id);
    if (point == nullptr || !point->steps || !point->speedup) {
      entry["status"] = "not measured";
      for (const PointRecord& p : sweep.points) {
        if (p.id == id && !p.reason.empty()) entry["status"] = p.status + ": " + p.reason;
      }
      measured.push_back(entry);
      continue;
    }
    const double step = point->time.median / static_cast<double>(*point->steps);
    const double error = c.predicted_step_s / step - 1;
    errors.push_back(std::abs(error));
    entry["status"] = "ok";
    entry["measured_step_s"] = step;
    entry["relative_error"] = error;
    entry["speedup"] = *point->speedup;
    if (point->paired_baseline && !point->paired_baseline->ratios.empty()) {
      const auto [low, high] = std::minmax_element(point->paired_baseline->ratios.begin(),
                                                   point->paired_baseline->ratios.end());
      entry["speedup_range"] = {*low, *high};
      // Each round's paired speedup: the winner is judged against the default round by round.
      if (point->rounds.size() == point->paired_baseline->ratios.size()) {
        json by_round = json::object();
        for (std::size_t i = 0; i < point->rounds.size(); ++i) {
          by_round[std::to_string(point->rounds[i])] = point->paired_baseline->ratios[i];
        }
        entry["speedup_by_round"] = by_round;
      }
    }
    if (point->images_per_s) entry["images_per_s"] = point->images_per_s->median;
    measured.push_back(entry);
  }
  const json winners = tune_winners(measured, o.strategies);
  report["config"] = {{"model", model_name(o.model)}, {"cores", o.cores}, {"nodes", nodes}, {"network", network},
                      {"strategies", o.strategies}, {"budget_s", o.budget_s}, {"exhaustive", o.exhaustive}, {"repeat", o.repeat},
                      {"warmup", o.warmup}, {"min_time_s", o.min_time}, {"steps", steps},
                      {"batch", o.batch}, {"lr", float_setting(o.lr)}, {"momentum", float_setting(o.momentum)},
                      {"seed", o.seed}, {"pin", o.pin}, {"isa", o.isa},
                      {"data", o.data_dir ? json{{"source", "mnist"}, {"dir", o.data_dir->string()}}
                                          : json{{"source", "synthetic"}, {"train_samples", o.synthetic_samples}}}};
  report["serial_step_s"] = serial ? json(serial->time.median / static_cast<double>(serial->steps.value_or(steps)))
                                   : json(nullptr);
  report["candidates"] = all;
  report["measured"] = measured;
  report["winners"] = winners;
  report["planner_error"] = {{"points", errors.size()},
                             {"median_abs_relative_error", errors.empty() ? json(nullptr) : json(median_of(errors))},
                             {"max_abs_relative_error", errors.empty() ? json(nullptr)
                                                                       : json(*std::max_element(errors.begin(), errors.end()))}};
  // Where the cores sat while the candidates ran: what is best moves with it (docs/tune.md).
  report["core_placement"] = sweep.core_placement ? json(*sweep.core_placement) : json(nullptr);
  report["interrupted"] = sweep.interrupted;
  report["elapsed_s"] = now_seconds() - start;
  // The rounds every measured point took: fewer than --repeat where the budget ended them.
  int rounds_done = 0;
  for (const PointRecord& p : sweep.points) {
    if (p.measured()) rounds_done = std::max(rounds_done, static_cast<int>(p.rounds.size()));
  }
  if (!o.exhaustive) report["budget"] = {{"seconds", o.budget_s}, {"planned_s", profiled_s + planned},
                      {"used_s", report["elapsed_s"]}, {"rounds", o.repeat}, {"rounds_done", rounds_done},
                      {"cut", !sweep.interrupted && rounds_done < o.repeat}};
  return report;
}

}  // namespace cnnbench
