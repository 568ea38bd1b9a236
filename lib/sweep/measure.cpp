// One run of a sweep's point however it runs (in-process, launched under the MPI launcher, or a
// PyTorch peer's worker), its calibration, its traced run and its time to accuracy.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <utility>

#include "cnnbench/core.hpp"
#include "../strategies/strategy_options.hpp"
#include "cnnbench/report.hpp"
#include "runner.hpp"
#include "subprocess.hpp"

namespace cnnbench {

using nlohmann::json;

PointRecord SweepRunner::point_header(const PointSpec& point) const {
  PointRecord record;
  record.id = point.id();
  record.model = model_name(point.model);
  record.strategy = point.strategy;
  record.cores = point.cores;
  record.nodes = point.nodes;
  record.p = point.total_cores();
  record.series = point.strategy == "cluster" ? "cluster/c" + std::to_string(point.cores) : point.strategy;
  if (is_peer_strategy(point.strategy)) record.peer = true;
  if (!point.tuned.is_null()) {
    record.tuned = point.tuned;
    // A tuned winner of its own settings is a line of its own in the plots, not its default's.
    if (point.variant == "tuned") record.series += "/tuned";
  }
  if (!point.options.empty()) record.options = point.options;
  return record;
}

PointRecord SweepRunner::not_measured(const PointSpec& point, const std::string& status,
                                      const std::string& reason) const {
  PointRecord record = point_header(point);
  record.status = status;
  record.reason = reason;
  return record;
}

// The record of a point that cannot run here (its strategy is unavailable, or it would not fit in
// memory); none when it can.
std::optional<PointRecord> SweepRunner::unrunnable(const PointSpec& point) const {
  const auto info = available_.find(point.strategy);
  if (info != available_.end() && !info->second.available) {
    return not_measured(point, "skipped", info->second.reason);
  }
  const std::uint64_t needed = estimate_point_bytes(point, options_.batch, train_.count,
                                                    options_.target_accuracy ? train_.count / 6 : 0);
  const std::uint64_t free_bytes = available_memory_bytes();
  if (free_bytes > 0 && needed > free_bytes) {
    return not_measured(point, "skipped",
                        "needs about " + std::to_string(needed >> 20) + " MiB but MemAvailable is " +
                            std::to_string(free_bytes >> 20) + " MiB");
  }
  const bool in_process = point.strategy != "cluster" && !is_peer_strategy(point.strategy);
  if (in_process) {
    try {
      make_strategy(point.strategy);  // a strategy that cannot start here (no CUDA device) is skipped
    } catch (const Error& e) {
      return not_measured(point, "skipped", e.what());
    }
  }
  return std::nullopt;
}

void keep_median_repetition(PointRecord& record, std::span<const Repetition> timed) {
  std::vector<double> times;
  for (const Repetition& rep : timed) times.push_back(rep.seconds);
  const std::size_t median = median_repetition(times);
  const Repetition& chosen = timed[median];
  record.median_repetition = static_cast<int>(median);
  record.final_loss = chosen.final_loss;
  record.strategy_metrics = chosen.strategy_metrics;
  record.pin_map = chosen.pin_map;
  record.time_breakdown = chosen.time_breakdown;
  record.straggler = chosen.straggler;
  record.peer_info = chosen.peer_info;
  record.noise_warning = noise_warning(chosen.time_breakdown);
}

// The cores the point's repetitions run on; -1: wherever the strategy pins itself. The serial
// baseline runs on the first and the last core: the cores of one machine need not be equally
// fast (a virtual machine's cores share their hosts with other guests; core 0 takes most
// interrupts), and every speedup is measured against the faster one.
std::vector<int> SweepRunner::baseline_cores(const PointSpec& point) const {
  if (point.strategy != "serial" || !options_.pin || machine_cores_ < 2) return {-1};
  return {0, machine_cores_ - 1};
}

void SweepRunner::stop_check() const {
  if (options_.stop_requested && options_.stop_requested()) throw SweepInterrupted{};
}

// Calibration starts from this short probe, and gives up growing at a million steps.
constexpr std::int64_t first_probe_steps = 10;
constexpr std::int64_t max_calibrated_steps = 1'000'000;

// Calibrates the steps per repetition so that one takes at least --min-time, the way Google
// Benchmark sizes its runs: a probe of a few steps, then steps grown by the time wanted over the time taken (x1.4
// to land above it; x10 when the probe took under a tenth of it, too short to extrapolate from)
// until a probe reaches it, and a second probe of as many steps does too (one slow probe on a
// busy machine would otherwise leave repetitions far shorter). The probes are not measurements;
// the report keeps them, and the last one's steps are the point's.
CalibrationRecord SweepRunner::calibrate_steps(const PointSpec& point, int pin_core) {
  CalibrationRecord calibration{options_.min_time, {}};
  std::int64_t steps = first_probe_steps;
  bool reached_once = false;
  for (;;) {
    const Repetition probe = run_point(point, pin_core, steps);
    stop_check();
    calibration.probes.push_back({steps, probe.seconds});
    if (steps >= max_calibrated_steps) return calibration;
    if (probe.seconds >= options_.min_time) {
      if (reached_once) return calibration;
      reached_once = true;
      continue;
    }
    reached_once = false;
    const double grow = probe.seconds > 0.1 * options_.min_time
                            ? 1.4 * options_.min_time / probe.seconds
                            : 10.0;
    const auto next = static_cast<std::int64_t>(std::ceil(static_cast<double>(steps) * grow));
    steps = std::min(max_calibrated_steps, std::max(steps + 1, next));
  }
}

Repetition SweepRunner::run_point(const PointSpec& point, int pin_core, std::int64_t steps) {
  if (point.strategy == "cluster") return run_launched(point, steps);
  if (is_peer_strategy(point.strategy)) return run_peer(point, steps);
  return run_in_process(point, pin_core, steps);
}

TrainConfig SweepRunner::train_config(const PointSpec& point, std::int64_t steps) const {
  TrainConfig config;
  config.model = point.model;
  config.strategy = point.strategy;
  config.batch = options_.batch;
  config.sgd.lr = options_.lr;
  config.sgd.momentum = options_.momentum;
  config.seed = options_.seed;
  config.steps = steps >= 0 ? steps : options_.steps;
  config.epochs = options_.epochs;
  config.threads = point.cores;
  config.pin = options_.pin;
  config.shards = options_.shards;
  for (const OptionSpec* spec : strategy_option_specs()) {
    if (!spec->in_sweep || !spec->applies_to(point.strategy)) continue;
    const std::string value = sweep_option(*spec);
    if (!value.empty()) config.options[spec->name] = value;
  }
  for (const auto& [name, value] : point.options) config.options[name] = value;
  return config;
}

RunResult SweepRunner::train_in_process(const PointSpec& point, int pin_core, std::int64_t steps,
                                        std::int64_t trace_steps) const {
  RunOptions run_options;
  run_options.stop_requested = options_.stop_requested;
  run_options.interrupt_folder = scratch_;
  run_options.trace_steps = trace_steps;
  TrainConfig config = train_config(point, steps);
  if (pin_core >= 0) config.options[strategy_option::pin_core.name] = std::to_string(pin_core);
  RunResult result = run_training(config, train_, run_options);
  if (result.interrupted) throw SweepInterrupted{};
  return result;
}

Repetition SweepRunner::run_in_process(const PointSpec& point, int pin_core, std::int64_t steps) const {
  const RunResult result = train_in_process(point, pin_core, steps);
  if (result.diverged_at_step) {
    throw PointDiverged{divergence_text(*result.diverged_at_step, result.diverged_loss)};
  }
  CNNBENCH_CHECK(result.train_seconds > 0, point.id() + ": the run took no measurable time");
  Repetition rep;
  rep.seconds = result.train_seconds;
  rep.steps = result.steps_run;
  rep.final_loss = result.step_losses.empty() ? 0.0 : result.step_losses.back();
  rep.strategy_metrics = result.strategy_metrics;
  rep.pin_map = pin_map_json(result.pins);
  if (result.time_breakdown.measured()) {
    rep.time_breakdown = time_breakdown_json(result.time_breakdown);
    rep.straggler = straggler_json(result.time_breakdown);
  }
  return rep;
}

json SweepRunner::launch_for_json(const std::vector<std::string>& args, const std::filesystem::path& output,
                     const std::string& what) const {
  const std::filesystem::path log = scratch_ / "job.log";
  std::filesystem::remove(output);
  const int code = run_logged(args, log, options_.stop_requested);
  stop_check();
  if (code != 0) {
    fail(what + ": " + args[0] + " exited with " + std::to_string(code) + ": " + last_line(log));
  }
  try {
    return json::parse(read_file(output));
  } catch (const json::exception& e) {
    fail(what + ": unreadable output " + output.string() + ": " + e.what());
  }
}

// alpha and beta for the scaling model, from `cnnbench allreduce-bench` on the largest node
// count of the sweep (at least 2 ranks: one rank has no communication to measure).
void SweepRunner::measure_allreduce() {
  const auto info = available_.find("cluster");
  if (info == available_.end() || !info->second.available) return;
  const int ranks = std::max(2, *std::max_element(nodes_.begin(), nodes_.end()));
  if (!options_.quiet) std::fprintf(stderr, "measuring allreduce cost on %d ranks\n", ranks);
  const std::filesystem::path output = scratch_ / "allreduce.json";
  const std::vector<std::string> args = launcher_.allreduce_bench(ranks, output);
  const double started = now_seconds();
  try {
    report_.allreduce = launch_for_json(args, output, "allreduce benchmark");
    allreduce_bench_s_ = now_seconds() - started;
  } catch (const Error& e) {
    report_.allreduce = {{"ranks", ranks}, {"reason", e.what()}};
  }
  report_.allreduce["launch"] = launcher_.record(args);
  allreduce_measured_here_ = true;
}

namespace {

// The seconds of the sizes both benches timed, summed: the large sizes weigh most, as they do in
// a cluster point's step. None where either bench failed or they share no size.
std::optional<std::pair<double, double>> bench_totals(const json& first, const json& second) {
  if (!first.contains("sizes") || !second.contains("sizes")) return std::nullopt;
  std::map<double, double> times;
  for (const json& size : first.at("sizes")) times[size.value("bytes", 0.0)] = size.value("seconds", 0.0);
  double a = 0, b = 0;
  for (const json& size : second.at("sizes")) {
    const auto it = times.find(size.value("bytes", 0.0));
    if (it == times.end() || it->second <= 0 || size.value("seconds", 0.0) <= 0) continue;
    a += it->second;
    b += size.at("seconds").get<double>();
  }
  if (a <= 0 || b <= 0) return std::nullopt;
  return std::pair{a, b};
}

}  // namespace

// The bench prices every cluster point of the sweep, and it runs for a few seconds at one moment:
// a stretch of the machine at half speed then (seen here: 1 MiB timed at 555 us where the sweep
// before timed 111 us) moved every shared-memory prediction by +77% while the points ran at full
// speed. A slow stretch slows every size of the bench it falls in, so the faster of two benches
// minutes apart is the machine's; both totals are kept in `allreduce.benches`.
void SweepRunner::measure_allreduce_again() {
  if (!allreduce_measured_here_ || !report_.allreduce.contains("sizes")) return;
  if (options_.deadline_s > 0 && now_seconds() + allreduce_bench_s_ > options_.deadline_s) return;
  const int ranks = report_.allreduce.at("ranks").get<int>();
  if (!options_.quiet) std::fprintf(stderr, "measuring allreduce cost on %d ranks again\n", ranks);
  const std::filesystem::path output = scratch_ / "allreduce-again.json";
  const std::vector<std::string> args = launcher_.allreduce_bench(ranks, output);
  json again;
  try {
    again = launch_for_json(args, output, "allreduce benchmark");
  } catch (const Error& e) {
    report_.allreduce["benches"] = json::array({{{"when", "before the first cluster point"}, {"kept", true}},
                                                {{"when", "after the rounds"}, {"kept", false}, {"reason", e.what()}}});
    return;
  }
  again["launch"] = launcher_.record(args);
  const std::optional<std::pair<double, double>> totals = bench_totals(report_.allreduce, again);
  const bool keep_again = totals && totals->second < totals->first;
  json benches = json::array({{{"when", "before the first cluster point"}, {"kept", !keep_again}},
                              {{"when", "after the rounds"}, {"kept", keep_again}}});
  if (totals) {
    benches[0]["total_s"] = totals->first;
    benches[1]["total_s"] = totals->second;
  }
  if (keep_again) report_.allreduce = std::move(again);
  report_.allreduce["benches"] = std::move(benches);
}

namespace {

// The reason a launched run's report gives for diverging; nothing when it did not diverge.
std::optional<std::string> divergence_of(const std::filesystem::path& report) {
  std::error_code missing;
  if (!std::filesystem::is_regular_file(report, missing)) return std::nullopt;
  const json run = json::parse(read_file(report), nullptr, false);
  if (!run.is_object() || run.value("status", "") != "diverged") return std::nullopt;
  return run.value("reason", "diverged");
}

}  // namespace

// The command of a launched point's repetitions; its run report goes to the scratch folder.
std::vector<std::string> SweepRunner::launched_train_command(const PointSpec& point,
                                                             std::int64_t steps) const {
  return launcher_.train(train_config(point, steps), point.nodes, launched_report());
}

std::filesystem::path SweepRunner::launched_report() const { return scratch_ / "run.json"; }

Repetition SweepRunner::run_launched(const PointSpec& point, std::int64_t steps) const {
  const std::filesystem::path report = launched_report();
  json run;
  try {
    run = launch_for_json(launched_train_command(point, steps), report, point.id());
  } catch (const Error&) {
    // A diverged run exits 1 after writing its report, which says so.
    const std::optional<std::string> diverged = divergence_of(report);
    if (diverged) throw PointDiverged{*diverged};
    throw;
  }
  Repetition rep;
  rep.seconds = run.at("metrics").at("train_seconds").get<double>();
  rep.steps = run.at("metrics").at("steps").get<std::int64_t>();
  CNNBENCH_CHECK(rep.seconds > 0, point.id() + ": the run took no measurable time");
  const auto& losses = run.at("loss_curve");
  rep.final_loss = losses.empty() ? 0.0 : losses.back().get<double>();
  rep.strategy_metrics = run.at("strategy_metrics");
  rep.pin_map = run.at("pin_map");
  rep.time_breakdown = run.at("metrics").value("time_breakdown", json());
  rep.straggler = run.at("metrics").value("straggler", json());
  return rep;
}

// The steps of a point's trace: the last ones of its traced repetition, as many as train's
// --trace-steps keeps by default.
constexpr std::int64_t traced_steps = 20;

// One more repetition of the point, traced, apart from its timed ones (a trace's ring costs a little
// time per span, which the timed repetitions must not pay); returns the trace's path. The gpu
// strategy records no spans: Error, before running.
std::filesystem::path SweepRunner::trace_point(const PointSpec& point, int pin_core, std::int64_t steps) const {
  CNNBENCH_CHECK(point.strategy != "gpu", "the gpu strategy records no spans yet");
  CNNBENCH_CHECK(!is_peer_strategy(point.strategy), "the PyTorch peers record no spans");
  const std::filesystem::path path = *options_.trace_dir / trace_file_name(point);
  if (point.strategy == "cluster") {
    std::vector<std::string> args = launched_train_command(point, steps);
    // Absolute: the ranks of another host need not start in this folder. --force: the sweep has
    // applied the output rule to its traces already (a --resume or --force sweep replaces them).
    args.insert(args.end(), {"--trace", std::filesystem::absolute(path).string(), "--trace-steps",
                             std::to_string(traced_steps), "--force"});
    launch_for_json(args, launched_report(), point.id() + " traced");
    return path;
  }
  const RunResult result = train_in_process(point, pin_core, steps, traced_steps);
  write_json(path, chrome_trace_json(result.trace, timed_layer_names(point.model)));
  return path;
}

json SweepRunner::time_to_accuracy(const PointSpec& point) {
  if (is_peer_strategy(point.strategy)) return peer_time_to_accuracy(point);
  TimeToAccuracyJob job;
  const TrainConfig config = train_config(point);
  job.config = config;
  if (options_.data_dir) {
    job.config["data_dir"] = options_.data_dir->string();
  } else {
    job.config["synthetic"] = options_.synthetic_samples;
  }
  job.target = *options_.target_accuracy;
  job.eval_every = options_.eval_every;
  job.max_steps = options_.tta_max_steps;
  try {
    if (point.strategy != "cluster") return measure_time_to_accuracy(job);
    const std::filesystem::path job_file = scratch_ / "tta-job.json";
    const std::filesystem::path result = scratch_ / "tta.json";
    write_json(job_file, job);
    const std::vector<std::string> args =
        launcher_.time_to_accuracy(point.nodes, point.cores, job_file, result);
    return launch_for_json(args, result, point.id() + " time to accuracy");
  } catch (const Error& e) {
    return {{"target", job.target}, {"reached", false}, {"seconds", nullptr}, {"steps", nullptr},
            {"error", e.what()}, {"curve", json::array()}};
  }
}

PeerFiles& SweepRunner::peer_files() {
  if (!peer_files_) peer_files_ = std::make_unique<PeerFiles>(options_, train_, scratch_ / "peer");
  return *peer_files_;
}

// The steps of a run: as asked, else the sweep's --steps, else its --epochs in steps.
std::int64_t SweepRunner::peer_steps(std::int64_t steps) const {
  if (steps >= 0) return steps;
  if (options_.steps >= 0) return options_.steps;
  return options_.epochs * sharded_steps_per_epoch(train_.set_size(), options_.shards, options_.batch);
}

Repetition SweepRunner::run_peer(const PointSpec& point, std::int64_t steps) {
  const std::filesystem::path output = scratch_ / "peer.json";
  std::vector<std::string> args = peer_command(options_, peer_files(), point, peer_steps(steps));
  args.insert(args.end(), {"--out", output.string()});
  const json run = launch_for_json(args, output, point.id());
  try {
    return peer_repetition(run, args);
  } catch (const json::exception& e) {
    fail(point.id() + ": unexpected output of " + args[1] + ": " + e.what());
  }
}

// What a repetition keeps of the worker's output `run` of the command `args`.
Repetition SweepRunner::peer_repetition(const json& run, const std::vector<std::string>& args) const {
  Repetition rep;
  rep.seconds = run.at("train_seconds").get<double>();
  rep.steps = run.at("steps").get<std::int64_t>();
  CNNBENCH_CHECK(rep.seconds > 0, "the run took no measurable time");
  // The worker writes a loss that is not finite as text ("nan"): JSON has no number for it.
  const json& loss = run.at("final_loss");
  if (!loss.is_number()) {
    throw PointDiverged{"the loss of the last step was " + loss.get<std::string>() + "; try a smaller --lr"};
  }
  rep.final_loss = loss.get<double>();
  rep.pin_map = run.at("pin_map");
  rep.peer_info = run.at("peer_info");
  rep.peer_info["command"] = args;
  return rep;
}

// The same rule as ours (time_to_accuracy.cpp): the clock starts before the data is read, the test
// set is evaluated every eval_every steps inside it; the worker runs at most tta_max_steps.
json SweepRunner::peer_time_to_accuracy(const PointSpec& point) {
  const std::filesystem::path output = scratch_ / "peer-tta.json";
  try {
    std::vector<std::string> args =
        peer_command(options_, peer_files(), point, options_.tta_max_steps, *options_.target_accuracy);
    args.insert(args.end(), {"--out", output.string()});
    return launch_for_json(args, output, point.id() + " time to accuracy").at("time_to_accuracy");
  } catch (const Error& e) {
    return {{"target", *options_.target_accuracy}, {"reached", false}, {"seconds", nullptr},
            {"steps", nullptr}, {"error", e.what()}, {"curve", json::array()}};
  }
}

}  // namespace cnnbench
