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

namespace cnnbench::cli {

namespace {

struct SweepArgs {
  std::vector<std::string> models = {"fc3", "lenet5"};
  std::vector<std::string> strategies;
  std::vector<int> cores, nodes;
  int repeat = 3, warmup = 1;
  std::int64_t steps = 60, epochs = -1;
  int batch = 64;
  float lr = 0.01f, momentum = 0.9f;
  std::uint64_t seed = 1;
  bool no_pin = false, resume = false, force = false, quiet = false;
  std::map<std::string, std::string> options;  // strategy options passed on; "" = not given
  std::string isa = "best";
  std::string data_dir;
  std::size_t synthetic = 8192;
  double target_accuracy = -1;
  std::int64_t eval_every = 25, tta_max_steps = 3000;
  std::string launcher = "mpirun", launcher_args, hostfile;
  std::string out = "results/sweep.json";
  // Internal: one time-to-accuracy job of a cluster point, run by the sweep under the launcher.
  std::string tta_job, tta_out;
};

std::atomic<bool> stop_signal{false};
extern "C" void on_sweep_stop_signal(int) { stop_signal.store(true); }

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// Every rank runs the job; rank 0 writes the result where the sweep reads it.
int run_time_to_accuracy_job(const SweepArgs& a) {
  const auto job = nlohmann::json::parse(read_file(a.tta_job)).get<TimeToAccuracyJob>();
  bool primary = true;
  const nlohmann::json result = measure_time_to_accuracy(job, &primary);
  if (primary) write_json(a.tta_out, result);
  return 0;
}

int run_sweep_command(const SweepArgs& a) {
  if (!a.tta_job.empty()) return run_time_to_accuracy_job(a);
  // Hours of measurements must not vanish under a repeated command: say how to keep or replace them.
  if (!a.resume && !a.force && std::filesystem::exists(a.out)) {
    fail(a.out + " already exists: pass --resume to keep its finished points and measure the rest, "
                 "or --force to overwrite it");
  }
  check_output_path(a.out, "--out");  // before the first point, not after the last
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
  for (const auto& [name, value] : a.options) {
    if (!value.empty()) o.options[name] = value;
  }
  use_isa(a.isa);
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
  o.stop_requested = [] { return stop_signal.load(); };

  const SweepRecord report = run_sweep(o);
  if (!a.quiet) std::fprintf(stderr, "report: %s\n", a.out.c_str());
  if (report.interrupted) return 130;
  return report.failed_points().empty() ? 0 : 1;
}

}  // namespace

void add_sweep_command(CLI::App& root, Runner& runner) {
  auto args = std::make_shared<SweepArgs>();
  CLI::App* cmd = root.add_subcommand(
      "sweep", "Run the benchmark sweep: serial baseline, then every strategy x cores x nodes point");
  cmd->add_option("--model", args->models, "models, comma separated")
      ->delimiter(',')
      ->check(CLI::IsMember({"fc3", "lenet5"}))
      ->capture_default_str();
  add_isa_option(cmd, args->isa);
  cmd->add_option("--strategies", args->strategies,
                  "strategies, comma separated (default: every strategy; missing ones are listed as skipped)")
      ->delimiter(',');
  cmd->add_option("--cores", args->cores, "threads per node / pinned cores, comma separated (default 1..nproc)")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--nodes", args->nodes, "MPI ranks of cluster points, comma separated (default 1..min(4, nproc))")
      ->delimiter(',')
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--repeat", args->repeat, "measured repetitions per point")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "unmeasured repetitions before them")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  auto* epochs = cmd->add_option("--epochs", args->epochs, "epochs per repetition (instead of --steps)")
                     ->check(CLI::PositiveNumber);
  cmd->add_option("--steps", args->steps, "optimizer steps per repetition")
      ->check(CLI::PositiveNumber)
      ->excludes(epochs)
      ->capture_default_str();
  cmd->add_option("--batch", args->batch, "mini-batch size")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("--lr", args->lr, "learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--momentum", args->momentum, "SGD momentum")->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  cmd->add_option("--seed", args->seed, "seed of init, data and shuffling")->capture_default_str();
  cmd->add_flag("--no-pin", args->no_pin, "do not bind worker threads to cores");
  add_strategy_option_flags(cmd, args->options, OptionFlags::sweep);
  auto* data = cmd->add_option("--data", args->data_dir, "MNIST folder (default: synthetic data)");
  cmd->add_option("--synthetic", args->synthetic, "synthetic training samples when --data is not given")
      ->check(CLI::PositiveNumber)
      ->excludes(data)
      ->capture_default_str();
  cmd->add_option("--target-accuracy", args->target_accuracy,
                  "also measure wall time until test accuracy first reaches this fraction")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--eval-every", args->eval_every, "time to accuracy: steps between test evaluations")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--tta-max-steps", args->tta_max_steps, "time to accuracy: give up after this many steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--mpirun", args->launcher, "MPI launcher of cluster points")->capture_default_str();
  cmd->add_option("--mpirun-args", args->launcher_args, "extra launcher arguments, one string");
  cmd->add_option("--hostfile", args->hostfile, "launcher hostfile")->check(CLI::ExistingFile);
  cmd->add_option("--out", args->out, "the JSON report (rewritten after every point)")->capture_default_str();
  cmd->add_flag("--resume", args->resume, "keep the finished points of --out and run the rest");
  cmd->add_flag("--force", args->force, "overwrite an existing --out report");
  cmd->add_flag("--quiet", args->quiet, "no progress lines");
  cmd->add_option("--tta-job", args->tta_job)->group("");
  cmd->add_option("--tta-out", args->tta_out)->group("");
  cmd->callback([args, &runner] { runner = [args] { return run_sweep_command(*args); }; });
}

}  // namespace cnnbench::cli
