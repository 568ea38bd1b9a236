// `cnnbench sweep`: the benchmark users come for. Serial baselines, then every model x strategy x
// cores x nodes point, repeated; a JSON report with speedups, fits and the scaling prediction.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <sstream>

#include "cnnbench/core.hpp"
#include "cnnbench/isa.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/sweep.hpp"
#include "commands.hpp"
#include "input_rules.hpp"

namespace cnnbench::cli {

namespace {

struct SweepArgs : CommonArgs {
  SweepArgs() {
    synthetic = 8192;
    steps = 60;
    epochs = -1;
  }
  std::vector<std::string> models = {"fc3", "lenet5"};
  std::vector<std::string> strategies;
  std::vector<int> cores, nodes;
  int repeat = 3, warmup = 1;
  bool resume = false, force = false;
  double target_accuracy = -1;
  std::int64_t eval_every = 25, tta_max_steps = 3000;
  std::string launcher = "mpirun", launcher_args, hostfile;
  std::string out = "results/sweep.json";
  // Internal: one time-to-accuracy job of a cluster point, run by the sweep under the launcher.
  std::string tta_job, tta_out;
  std::vector<const OptionSpec*> given_options;  // the strategy options given on the command line
};

std::atomic<int> stop_signal{0};  // the first SIGINT or SIGTERM; 0 = none
extern "C" void on_sweep_stop_signal(int signal) {
  int none = 0;
  stop_signal.compare_exchange_strong(none, signal);
}

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// Repeated list items are measured once; the cores per node (and, without a hostfile, the ranks
// of one thread each) must fit the machine unless --oversubscribe.
void check_sweep_args(SweepArgs& a) {
  drop_repeats("--model", a.models);
  drop_repeats("--strategies", a.strategies);
  drop_repeats("--cores", a.cores);
  drop_repeats("--nodes", a.nodes);
  for (int cores : a.cores) check_threads("--cores", cores, 1, a.batch, a.oversubscribe);
  if (a.hostfile.empty()) {
    for (int nodes : a.nodes) check_threads("--nodes", nodes, 1, a.batch, a.oversubscribe);
  }
}

// Every rank runs the job; rank 0 writes the result where the sweep reads it.
int run_time_to_accuracy_job(const SweepArgs& a) {
  const auto job = nlohmann::json::parse(read_file(a.tta_job)).get<TimeToAccuracyJob>();
  bool primary = true;
  const nlohmann::json result = measure_time_to_accuracy(job, &primary);
  if (primary) write_json(a.tta_out, result);
  return 0;
}

// A strategy option that none of the chosen strategies reads is a mistake, as it is for train.
void check_options_apply(const SweepArgs& a) {
  if (a.strategies.empty()) return;  // every strategy
  std::string chosen;
  for (const std::string& s : a.strategies) chosen += (chosen.empty() ? "" : ",") + s;
  for (const OptionSpec* spec : a.given_options) {
    bool applies = false;
    for (const std::string& s : a.strategies) applies = applies || spec->applies_to(s);
    if (!applies) {
      fail(spec->flag() + " does not apply to --strategies " + chosen + " (it is an option of " +
           spec->strategies_text() + ")");
    }
  }
}

int run_sweep_command(const SweepArgs& a) {
  if (!a.tta_job.empty()) return run_time_to_accuracy_job(a);
  check_options_apply(a);
  check_output_path(a.out, "--out");  // before the first point, not after the last
  // Hours of measurements must not vanish under a repeated command: say how to keep or replace them.
  if (!a.resume && !a.force && std::filesystem::exists(a.out)) {
    fail(a.out + " already exists: pass --resume to keep its finished points and measure the rest, "
                 "or --force to overwrite it");
  }
  SweepOptions o;
  o.models.clear();
  for (const auto& m : a.models) o.models.push_back(parse_model(m));
  o.strategies = a.strategies;
  o.cores = a.cores;
  o.nodes = a.nodes;
  o.repeat = a.repeat;
  o.warmup = a.warmup;
  o.steps = a.epochs > 0 ? -1 : a.steps;
  o.epochs = a.epochs;
  o.batch = a.batch;
  o.lr = a.lr;
  o.momentum = a.momentum;
  o.seed = a.seed;
  o.pin = !a.no_pin;
  o.oversubscribe = a.oversubscribe;
  for (const auto& [name, value] : a.options) {
    if (!value.empty()) o.options[name] = value;
  }
  use_isa(a.isa);
  if (!o.models.empty()) check_memory_for(a, PointSpec{o.models.front(), "serial", 1, 1}, 0);
  o.isa = a.isa;
  if (!a.data_dir.empty()) o.data_dir = std::filesystem::absolute(a.data_dir);
  o.synthetic_samples = a.synthetic;
  if (a.target_accuracy > 0) o.target_accuracy = a.target_accuracy;
  o.eval_every = a.eval_every;
  o.tta_max_steps = a.tta_max_steps;
  o.launcher = a.launcher;
  o.launcher_args = split_words(a.launcher_args);
  if (!a.hostfile.empty()) o.hostfile = std::filesystem::absolute(a.hostfile);
  o.self = std::filesystem::read_symlink("/proc/self/exe");
  o.out = a.out;
  o.resume = a.resume;
  o.quiet = a.quiet;
  std::signal(SIGINT, on_sweep_stop_signal);
  std::signal(SIGTERM, on_sweep_stop_signal);
  o.stop_requested = [] { return stop_signal.load() != 0; };

  const SweepRecord report = run_sweep(o);
  if (!a.quiet) std::fprintf(stderr, "report: %s\n", a.out.c_str());
  if (report.interrupted) return 128 + (stop_signal.load() != 0 ? stop_signal.load() : SIGINT);
  return report.failed_points().empty() ? 0 : 1;
}

}  // namespace

void add_sweep_command(CLI::App& root, Runner& runner) {
  auto args = std::make_shared<SweepArgs>();
  CLI::App* cmd = root.add_subcommand(
      "sweep", "Run the benchmark sweep: serial baseline, then every strategy x cores x nodes point");
  cmd->add_option("--model", args->models, "models, comma separated")
      ->delimiter(',')
      ->check(CLI::IsMember(model_choices()))
      ->capture_default_str();
  cmd->add_option("--strategies", args->strategies,
                  "strategies, comma separated (default: every strategy; missing ones are listed as skipped)")
      ->delimiter(',');
  add_number_option(cmd, general_option::sweep_cores, args->cores);
  add_number_option(cmd, general_option::nodes, args->nodes);
  add_common_flags(cmd, *args, OptionFlags::sweep);
  add_number_option(cmd, general_option::repeat, args->repeat)->capture_default_str();
  add_number_option(cmd, general_option::warmup, args->warmup)->capture_default_str();
  add_number_option(cmd, general_option::target_accuracy, args->target_accuracy);
  add_number_option(cmd, general_option::eval_every, args->eval_every)->capture_default_str();
  add_number_option(cmd, general_option::tta_max_steps, args->tta_max_steps)->capture_default_str();
  cmd->add_option("--mpirun", args->launcher, "MPI launcher of cluster points")->capture_default_str();
  cmd->add_option("--mpirun-args", args->launcher_args, "extra launcher arguments, one string");
  cmd->add_option("--hostfile", args->hostfile, "launcher hostfile")
      ->check(input_path_rule(PathKind::file, true));
  cmd->add_option("--out", args->out, "the JSON report (rewritten after every point)")->capture_default_str();
  cmd->add_flag("--resume", args->resume, "keep the finished points of --out and run the rest");
  cmd->add_flag("--force", args->force, "overwrite an existing --out report");
  cmd->add_option("--tta-job", args->tta_job)->group("");
  cmd->add_option("--tta-out", args->tta_out)->group("");
  cmd->callback([args, cmd, &runner] {
    take_isa_from_environment(cmd, args->isa);
    for (const OptionSpec* spec : strategy_option_specs()) {
      if (spec->in_sweep && cmd->count(spec->flag()) > 0) args->given_options.push_back(spec);
    }
    if (args->tta_job.empty()) check_sweep_args(*args);
    runner = [args] { return run_sweep_command(*args); };
  });
}

}  // namespace cnnbench::cli
