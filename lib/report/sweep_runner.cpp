// The sweep runner: serial baselines first, then every point of models x strategies x cores x
// nodes, each repeated, in-process through run_training or (cluster) under the MPI launcher; the
// report is rewritten atomically after every finished point so an interrupted sweep keeps them.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/sweep.hpp"
#include "cnnbench/train.hpp"

extern char** environ;

namespace cnnbench {

namespace {

using nlohmann::json;

struct Interrupted {};

struct Repetition {
  double seconds = 0;
  std::int64_t steps = 0;
  double final_loss = 0;
  json strategy_metrics = json::object();
  json pin_map = json::array();
};

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

// The last non-empty line of a log, to say why a launched job failed.
std::string last_line(const std::filesystem::path& log) {
  std::string text;
  try {
    text = read_file(log);
  } catch (const Error&) {
    return "(no output)";
  }
  std::istringstream lines(text);
  std::string line, last = "(no output)";
  while (std::getline(lines, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  return last;
}

// Runs argv (searched in PATH) with stdout and stderr into log; waits, forwarding a stop request
// as SIGTERM. Returns the exit code (128 + signal when killed).
int run_logged(const std::vector<std::string>& args, const std::filesystem::path& log,
               const std::function<bool()>& stop_requested) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  // In the scratch folder, so that files a job leaves behind (a checkpoint of an interrupted run)
  // go away with it; every path handed to the job is absolute.
  posix_spawn_file_actions_addchdir_np(&actions, log.parent_path().c_str());
  std::vector<std::string> words = args;
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int status = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (status != 0) fail("cannot start " + args[0] + ": " + std::strerror(status));
  bool stop_sent = false;
  for (;;) {
    int wait_status = 0;
    const pid_t done = ::waitpid(pid, &wait_status, WNOHANG);
    if (done == pid) {
      return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
    }
    if (done < 0 && errno != EINTR) fail(std::string("waiting for ") + args[0] + ": " + std::strerror(errno));
    if (!stop_sent && stop_requested && stop_requested()) {
      ::kill(pid, SIGTERM);
      stop_sent = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

class SweepRunner {
 public:
  explicit SweepRunner(const SweepOptions& options) : options_(options) {
    machine_cores_ = std::max(1, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
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
    for (const auto& s : options.strategies) {
      if (!available_.count(s)) {
        std::string known;
        for (const auto& [name, info] : available_) known += (known.empty() ? "" : ", ") + name;
        fail("--strategies: unknown strategy '" + s + "' (known: " + known + ")");
      }
    }
    scratch_ = std::filesystem::temp_directory_path() /
               ("cnnbench-sweep-" + std::to_string(::getpid()));
    std::filesystem::create_directories(scratch_);
  }

  ~SweepRunner() {
    std::error_code ignored;
    std::filesystem::remove_all(scratch_, ignored);
  }

  json run() {
    load_data();
    const std::vector<PointSpec> plan = plan_points(options_, cores_, nodes_, machine_cores_);
    report_ = {{"schema_version", sweep_schema_version},
               {"kind", "sweep"},
               {"complete", false},
               {"interrupted", false},
               {"context", collect_context()},
               {"config", config_json()},
               {"features", build_features()},
               {"allreduce", nullptr},
               {"points", json::array()},
               {"amdahl", json::array()},
               {"scaling_prediction", json::array()}};
    std::map<std::string, json> kept = resumed_points();
    const double start = now_seconds();
    double cost_done = 0, cost_total = 0, seconds_done = 0;
    for (const auto& p : plan) cost_total += point_cost(p);
    try {
      for (std::size_t i = 0; i < plan.size(); ++i) {
        const PointSpec& point = plan[i];
        const auto old = kept.find(point.id());
        if (old != kept.end()) {
          report_["points"].push_back(old->second);
          cost_total -= point_cost(point);
          continue;
        }
        announce(i, plan.size(), point, cost_done > 0 ? seconds_done / cost_done * (cost_total - cost_done) : -1);
        const double point_start = now_seconds();
        if (point.strategy == "cluster" && report_["allreduce"].is_null()) measure_allreduce();
        json record = measure(point);
        seconds_done += now_seconds() - point_start;
        cost_done += point_cost(point);
        report_["points"].push_back(record);
        finish_point(record);
      }
      report_["complete"] = true;
    } catch (const Interrupted&) {
      report_["interrupted"] = true;
      if (!options_.quiet) std::fprintf(stderr, "sweep interrupted: the report keeps the finished points\n");
    }
    report_["elapsed_s"] = now_seconds() - start;
    save();
    if (!options_.quiet && report_.contains("baseline_warning")) {
      std::fprintf(stderr, "warning: %s\n",
                   report_["baseline_warning"]["message"].get<std::string>().c_str());
    }
    return report_;
  }

 private:
  void load_data() {
    if (options_.data_dir) {
      train_ = load_mnist(*options_.data_dir, Split::train);
    } else {
      CNNBENCH_CHECK(options_.synthetic_samples > 0, "--synthetic must be positive");
      train_ = make_synthetic(options_.synthetic_samples, options_.seed);
    }
  }

  // The sweep's strategy options as the report records them: every option the sweep passes on,
  // "" (0 for a whole number) when not given and without a sweep default.
  json options_json() const {
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

  std::string sweep_option(const OptionSpec& spec) const {
    const auto it = options_.options.find(spec.name);
    return it != options_.options.end() ? it->second : spec.sweep_default;
  }

  json config_json() const {
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
            {"warmup", options_.warmup},
            {"steps", options_.steps},
            {"epochs", options_.steps >= 0 ? json(nullptr) : json(options_.epochs)},
            {"batch", options_.batch},
            {"lr", options_.lr},
            {"momentum", options_.momentum},
            {"seed", options_.seed},
            {"pin", options_.pin},
            {"isa", options_.isa},
            {"data", data},
            {"target_accuracy", options_.target_accuracy ? json(*options_.target_accuracy) : json(nullptr)},
            {"eval_every", options_.eval_every},
            {"tta_max_steps", options_.tta_max_steps},
            {"machine_cores", machine_cores_},
            {"launcher",
             {{"command", options_.launcher},
              {"args", options_.launcher_args},
              {"hostfile", options_.hostfile ? json(options_.hostfile->string()) : json(nullptr)}}}};
    config.update(options_json());
    return config;
  }

  // With --resume, the finished points of the existing report, after checking it was made with
  // the same settings (launcher and machine aside).
  std::map<std::string, json> resumed_points() {
    std::map<std::string, json> kept;
    if (!options_.resume || !std::filesystem::exists(options_.out)) return kept;
    const json old = read_report(options_.out);
    json old_config = old.at("config"), new_config = report_.at("config");
    for (json* c : {&old_config, &new_config}) {
      c->erase("launcher");
      c->erase("machine_cores");
    }
    for (auto it = new_config.begin(); it != new_config.end(); ++it) {
      if (!old_config.contains(it.key()) || old_config.at(it.key()) != it.value()) {
        fail("--resume: " + options_.out.string() + " was made with a different " + it.key() + " (" +
             (old_config.contains(it.key()) ? old_config.at(it.key()).dump() : "none") + ", now " +
             it.value().dump() + "); pass the same flags or drop --resume");
      }
    }
    for (const auto& p : old.at("points")) {
      if (p.at("status") != "failed") kept[p.at("id").get<std::string>()] = p;
    }
    if (old.contains("allreduce") && old.at("allreduce").is_object()) report_["allreduce"] = old.at("allreduce");
    if (!options_.quiet) {
      std::fprintf(stderr, "resuming %s: %zu finished points kept\n", options_.out.c_str(), kept.size());
    }
    return kept;
  }

  double point_cost(const PointSpec& p) const {
    const double reps = options_.repeat + options_.warmup + (options_.target_accuracy ? 3 : 0);
    const double launch = p.strategy == "cluster" ? 2e8 : 0.0;  // an mpirun start, in FLOP-equivalents
    return reps * (model_spec(p.model).train_flops_per_image * options_.batch + launch);
  }

  void announce(std::size_t index, std::size_t total, const PointSpec& point, double eta) const {
    if (options_.quiet) return;
    std::fprintf(stderr, "[%zu/%zu] %-22s %s\n", index + 1, total, point.id().c_str(),
                 eta >= 0 ? ("ETA " + duration_text(eta)).c_str() : "");
  }

  void finish_point(const json& record) {
    add_scaling_analysis(report_);
    save();
    if (options_.quiet) return;
    const json& p = report_["points"].back();
    if (record.at("status") != "ok") {
      std::fprintf(stderr, "    %s: %s\n", record.at("status").get<std::string>().c_str(),
                   record.at("reason").get<std::string>().c_str());
      return;
    }
    std::fprintf(stderr, "    median %.3f s (MAD %.3f), %.0f images/s", p["time"]["median"].get<double>(),
                 p["time"]["mad"].get<double>(), p["images_per_s"]["median"].get<double>());
    if (p.contains("speedup")) std::fprintf(stderr, ", speedup %.2f", p["speedup"].get<double>());
    if (p.contains("time_to_accuracy") && p["time_to_accuracy"].value("reached", false)) {
      std::fprintf(stderr, ", %.1f s to %.0f%%", p["time_to_accuracy"]["seconds"].get<double>(),
                   100 * p["time_to_accuracy"]["target"].get<double>());
    }
    std::fprintf(stderr, "\n");
  }

  void save() const {
    if (!options_.out.empty()) write_json(options_.out, report_);
  }

  json point_header(const PointSpec& point) const {
    return {{"id", point.id()},
            {"model", model_name(point.model)},
            {"strategy", point.strategy},
            {"cores", point.cores},
            {"nodes", point.nodes},
            {"p", point.total_cores()},
            {"series", point.strategy == "cluster" ? "cluster/c" + std::to_string(point.cores) : point.strategy}};
  }

  json not_measured(const PointSpec& point, const std::string& status, const std::string& reason) const {
    json record = point_header(point);
    record["status"] = status;
    record["reason"] = reason;
    return record;
  }

  json measure(const PointSpec& point) {
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
    const bool in_process = point.strategy != "cluster";
    if (in_process) {
      try {
        make_strategy(point.strategy);  // a strategy that cannot start here (no CUDA device) is skipped
      } catch (const Error& e) {
        return not_measured(point, "skipped", e.what());
      }
    }
    json record = point_header(point);
    // One series of repetitions per core the point is pinned to (several only for the baseline),
    // taken in turn so that a drifting machine affects them alike.
    const std::vector<int> cores = baseline_cores(point);
    struct Series {
      std::vector<double> times, warmup_times, rates;
      Repetition last;
    };
    std::vector<Series> series(cores.size());
    // Every point but the baseline takes turns with serial repetitions of its own, so that its
    // speedup compares runs made seconds apart, not runs minutes apart on a machine whose speed
    // drifts (a shared virtual machine's does, by several percent).
    const std::optional<PairedBaseline> pair = paired_baseline_of(point);
    std::vector<double> baseline_times, baseline_warmup_times;
    try {
      for (int r = 0; r < options_.warmup + options_.repeat; ++r) {
        if (pair) {
          const Repetition baseline = run_in_process(pair->point, pair->core);
          stop_check();
          (r < options_.warmup ? baseline_warmup_times : baseline_times).push_back(baseline.seconds);
        }
        for (std::size_t k = 0; k < cores.size(); ++k) {
          Series& s = series[k];
          s.last = in_process ? run_in_process(point, cores[k]) : run_launched(point);
          stop_check();
          (r < options_.warmup ? s.warmup_times : s.times).push_back(s.last.seconds);
          if (r >= options_.warmup) {
            s.rates.push_back(static_cast<double>(s.last.steps) * options_.batch / s.last.seconds);
          }
        }
      }
    } catch (const Error& e) {
      return not_measured(point, "failed", e.what());
    }
    std::size_t best = 0;
    for (std::size_t k = 1; k < series.size(); ++k) {
      if (summarize(series[k].times).median < summarize(series[best].times).median) best = k;
    }
    if (series.size() > 1) {
      json per_core = json::array();
      for (std::size_t k = 0; k < series.size(); ++k) {
        per_core.push_back({{"core", cores[k]},
                            {"times_s", series[k].times},
                            {"images_per_s", summary_json(summarize(series[k].rates))}});
      }
      record["baseline_cores"] = {
          {"chosen", cores[best]},
          {"per_core", per_core},
          {"meaning", "the baseline ran on each of these cores in turn; the fastest core's "
                      "repetitions are the point's times, so no speedup gains from a slow core"}};
    }
    const std::vector<double>& times = series[best].times;
    const Repetition& last = series[best].last;
    record["status"] = "ok";
    record["times_s"] = times;
    record["warmup_times_s"] = series[best].warmup_times;
    record["time"] = summary_json(summarize(times));
    record["images_per_s"] = summary_json(summarize(series[best].rates));
    record["steps"] = last.steps;
    record["batch"] = options_.batch;
    record["final_loss"] = last.final_loss;
    record["strategy_metrics"] = last.strategy_metrics;
    record["pin_map"] = last.pin_map;
    if (pair) {
      std::vector<double> ratios;
      for (std::size_t i = 0; i < times.size(); ++i) ratios.push_back(baseline_times[i] / times[i]);
      record["paired_baseline"] = {
          {"core", pair->core >= 0 ? json(pair->core) : json(nullptr)},
          {"times_s", baseline_times},
          {"warmup_times_s", baseline_warmup_times},
          {"ratios", ratios},
          {"meaning", "a serial repetition ran just before each of the point's repetitions; "
                      "speedup is the median of the pairs' time ratios"}};
    }
    if (options_.target_accuracy) record["time_to_accuracy"] = time_to_accuracy(point);
    return record;
  }

  struct PairedBaseline {
    PointSpec point;
    int core = -1;  // the baseline's chosen core; -1: unpinned
  };

  // The measured serial point of the same model, on the core its repetitions were taken on.
  std::optional<PairedBaseline> paired_baseline_of(const PointSpec& point) const {
    if (point.strategy == "serial") return std::nullopt;
    const PointSpec serial{point.model, "serial", 1, 1};
    const json* measured = find_measured_point(report_.at("points"), serial.id());
    if (measured == nullptr) return std::nullopt;
    const json& cores = measured->value("baseline_cores", json::object());
    return PairedBaseline{serial, cores.contains("chosen") ? cores.at("chosen").get<int>() : -1};
  }

  // The cores the point's repetitions run on; -1: wherever the strategy pins itself. The serial
  // baseline runs on the first and the last core: the cores of one machine need not be equally
  // fast (a virtual machine's cores share their hosts with other guests; core 0 takes most
  // interrupts), and every speedup is measured against the faster one.
  std::vector<int> baseline_cores(const PointSpec& point) const {
    if (point.strategy != "serial" || !options_.pin || machine_cores_ < 2) return {-1};
    return {0, machine_cores_ - 1};
  }

  void stop_check() const {
    if (options_.stop_requested && options_.stop_requested()) throw Interrupted{};
  }

  TrainConfig train_config(const PointSpec& point) const {
    TrainConfig config;
    config.model = point.model;
    config.strategy = point.strategy;
    config.batch = options_.batch;
    config.sgd.lr = options_.lr;
    config.sgd.momentum = options_.momentum;
    config.seed = options_.seed;
    config.steps = options_.steps;
    config.epochs = options_.epochs;
    config.threads = point.cores;
    config.pin = options_.pin;
    for (const OptionSpec* spec : strategy_option_specs()) {
      if (!spec->in_sweep || !spec->applies_to(point.strategy)) continue;
      const std::string value = sweep_option(*spec);
      if (!value.empty()) config.options[spec->name] = value;
    }
    return config;
  }

  Repetition run_in_process(const PointSpec& point, int pin_core) const {
    RunOptions run_options;
    run_options.stop_requested = options_.stop_requested;
    run_options.interrupt_save = scratch_ / "interrupted.safetensors";
    TrainConfig config = train_config(point);
    if (pin_core >= 0) config.options["pin-core"] = std::to_string(pin_core);
    const RunResult result = run_training(config, train_, run_options);
    if (result.interrupted) throw Interrupted{};
    CNNBENCH_CHECK(result.train_seconds > 0, point.id() + ": the run took no measurable time");
    Repetition rep;
    rep.seconds = result.train_seconds;
    rep.steps = result.steps_run;
    rep.final_loss = result.step_losses.empty() ? 0.0 : result.step_losses.back();
    rep.strategy_metrics = result.strategy_metrics;
    rep.pin_map = pin_map_json(result.pins);
    return rep;
  }

  // The launcher's words before the command: Open MPI's mpirun gets --bind-to none (the strategy
  // pins its own threads), --allow-run-as-root as root and --oversubscribe when the job needs more
  // cores than this machine has; then --mpirun-args, --hostfile and -np.
  std::vector<std::string> launcher_words(int ranks, int cores_per_rank) const {
    std::vector<std::string> words = {options_.launcher};
    const std::string name = std::filesystem::path(options_.launcher).filename().string();
    if (name == "mpirun" || name == "mpiexec" || name == "orterun") {
      words.insert(words.end(), {"--bind-to", "none"});
      if (::geteuid() == 0) words.push_back("--allow-run-as-root");
      if (!options_.hostfile && ranks * cores_per_rank > machine_cores_) words.push_back("--oversubscribe");
    }
    words.insert(words.end(), options_.launcher_args.begin(), options_.launcher_args.end());
    if (options_.hostfile) words.insert(words.end(), {"--hostfile", options_.hostfile->string()});
    words.insert(words.end(), {"-np", std::to_string(ranks)});
    return words;
  }

  std::vector<std::string> data_words() const {
    if (options_.data_dir) return {"--data", options_.data_dir->string()};
    return {"--synthetic", std::to_string(options_.synthetic_samples)};
  }

  json launch_for_json(const std::vector<std::string>& args, const std::filesystem::path& output,
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
  void measure_allreduce() {
    const auto info = available_.find("cluster");
    if (info == available_.end() || !info->second.available) return;
    const int ranks = std::max(2, *std::max_element(nodes_.begin(), nodes_.end()));
    if (!options_.quiet) std::fprintf(stderr, "measuring allreduce cost on %d ranks\n", ranks);
    const std::filesystem::path output = scratch_ / "allreduce.json";
    std::vector<std::string> args = launcher_words(ranks, 1);
    args.insert(args.end(), {options_.self.string(), "allreduce-bench", "--report", output.string()});
    try {
      report_["allreduce"] = launch_for_json(args, output, "allreduce benchmark");
    } catch (const Error& e) {
      report_["allreduce"] = {{"ranks", ranks}, {"reason", e.what()}};
    }
  }

  Repetition run_launched(const PointSpec& point) const {
    std::vector<std::string> args = launcher_words(point.nodes, point.cores);
    const std::filesystem::path report = scratch_ / "run.json";
    args.insert(args.end(), {options_.self.string(), "train"});
    for (std::string& word : to_argv(train_config(point))) args.push_back(std::move(word));
    for (auto& w : data_words()) args.push_back(w);
    args.insert(args.end(), {"--quiet", "--report", report.string(), "--isa", options_.isa});
    const json run = launch_for_json(args, report, point.id());
    Repetition rep;
    rep.seconds = run.at("metrics").at("train_seconds").get<double>();
    rep.steps = run.at("metrics").at("steps").get<std::int64_t>();
    CNNBENCH_CHECK(rep.seconds > 0, point.id() + ": the run took no measurable time");
    const auto& losses = run.at("loss_curve");
    rep.final_loss = losses.empty() ? 0.0 : losses.back().get<double>();
    rep.strategy_metrics = run.at("strategy_metrics");
    rep.pin_map = run.at("pin_map");
    return rep;
  }

  json time_to_accuracy(const PointSpec& point) const {
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
      write_json(job_file, {{"config", job.config}, {"target", job.target},
                            {"eval_every", job.eval_every}, {"max_steps", job.max_steps}});
      std::vector<std::string> args = launcher_words(point.nodes, point.cores);
      args.insert(args.end(), {options_.self.string(), "sweep", "--tta-job", job_file.string(),
                               "--tta-out", result.string()});
      return launch_for_json(args, result, point.id() + " time to accuracy");
    } catch (const Error& e) {
      return {{"target", job.target}, {"reached", false}, {"seconds", nullptr}, {"steps", nullptr},
              {"error", e.what()}, {"curve", json::array()}};
    }
  }

  const SweepOptions& options_;
  int machine_cores_ = 1;
  std::vector<int> cores_, nodes_;
  std::map<std::string, StrategyInfo> available_;
  std::filesystem::path scratch_;
  Dataset train_;
  json report_;
};

}  // namespace

json run_sweep(const SweepOptions& options) {
  SweepRunner runner(options);
  return runner.run();
}

}  // namespace cnnbench
