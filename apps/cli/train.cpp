// `cnnbench train`: one training run of one strategy, with a progress bar, a one-line summary and
// an optional JSON report and checkpoint.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cnnbench/core.hpp"
#include "cnnbench/isa.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/train.hpp"
#include "commands.hpp"
#include "input_rules.hpp"

namespace cnnbench::cli {

namespace {

struct TrainArgs : CommonArgs {
  TrainArgs() { data_dir = "datasets/mnist"; }
  std::string model = "lenet5";
  std::string strategy = "serial";
  float weight_decay = 0.0f;
  bool no_shuffle = false, eval = false;
  std::string init, save, resume, report, trace;
  std::string save_init;  // write the initial weights and train nothing (no step: no loss, no speed)
  int threads = 1;
  std::int64_t trace_steps = 20;
  std::string progress;  // "" = the default of progress_mode()
};

// The first SIGINT/SIGTERM asks for an orderly stop (the run ends after the current range, saves
// a checkpoint and exits 128 + the signal); a second one ends the process at once, removing the
// temporary file of a write in progress. Only async-signal-safe calls: a flag and write(2).
volatile std::sig_atomic_t stop_signal = 0;
volatile std::sig_atomic_t stop_message = 1;  // 0 on MPI ranks but rank 0
extern "C" void on_stop_signal(int signal) {
  if (stop_signal != 0) {
    remove_output_in_progress();
    ::_exit(128 + signal);
  }
  stop_signal = signal;
  static const char message[] =
      "\ncnnbench: stopping after the current steps, saving a checkpoint (again to abort at once)\n";
  if (stop_message) {
    [[maybe_unused]] const ssize_t ignored = ::write(STDERR_FILENO, message, sizeof message - 1);
  }
}

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

// This process's rank when an MPI launcher started it (before MPI is initialised), else -1.
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != 0) return std::atoi(value);
  }
  return -1;
}

// --progress, else: nothing with --quiet, lines under an MPI launcher (rank 0 prints them; its
// stderr is a pipe), a bar on a terminal, nothing otherwise (a log gets the summary line).
ProgressMode progress_mode(const TrainArgs& a) {
  if (!a.progress.empty()) return parse_progress_mode(a.progress);
  if (a.quiet) return ProgressMode::none;
  if (launcher_rank() >= 0) return ProgressMode::lines;
  return ::isatty(STDERR_FILENO) ? ProgressMode::bar : ProgressMode::none;
}

// Where an interrupted run without --save leaves its checkpoint: beside a report file, else here.
std::filesystem::path interrupt_folder(const std::string& report) {
  std::error_code error;
  if (report.empty() || report == "-" || !std::filesystem::path(report).has_parent_path()) return ".";
  const auto status = std::filesystem::status(report, error);
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) return ".";
  return std::filesystem::path(report).parent_path();
}

TrainConfig make_config(const TrainArgs& a) {
  TrainConfig c;
  c.model = parse_model(a.model);
  c.strategy = a.strategy;
  c.batch = a.batch;
  c.sgd = {a.lr, a.momentum, a.weight_decay};
  c.seed = a.seed;
  c.shuffle = !a.no_shuffle;
  c.steps = a.steps;
  c.epochs = a.epochs;
  if (!a.save_init.empty()) c.steps = 0;
  c.threads = a.threads;
  c.pin = !a.no_pin;
  for (const auto& [name, value] : a.options) {
    if (!value.empty()) c.options[name] = value;
  }
  return c;
}

int run_train(const TrainArgs& a) {
  // Before anything slow, so that an early Ctrl-C also ends in a clean stop.
  if (launcher_rank() > 0) stop_message = 0;
  install_stop_handlers();
  const TrainConfig config = make_config(a);
  const ProgressMode progress = progress_mode(a);
  // Every output is checked before the data is loaded: a typo costs nothing, not a whole run.
  if (!a.report.empty()) check_output_path(a.report, "--report");
  if (!a.save.empty()) check_output_path(a.save, "--save");
  if (!a.save_init.empty()) check_output_path(a.save_init, "--save-init");
  if (!a.trace.empty()) check_output_path(a.trace, "--trace");
  for (const auto& [name, value] : config.options) {
    if (const OptionSpec* spec = find_option_spec(name); spec != nullptr && spec->output_file) {
      check_output_path(value, spec->flag());
    }
  }
  use_isa(a.isa);
  const std::size_t test_samples =
      !a.eval ? 0 : a.synthetic > 0 ? std::max<std::size_t>(a.synthetic / 6, 1000) : 10000;
  // One worker's share (the whole batch): what any strategy needs at least.
  check_memory_for(a, PointSpec{config.model, a.strategy, 1, 1}, test_samples);
  Dataset train, test;
  if (a.synthetic > 0) {
    train = make_synthetic(a.synthetic, a.seed);
    if (a.eval) test = make_synthetic(test_samples, a.seed, a.synthetic);
  } else {
    train = load_mnist(a.data_dir, Split::train);
    if (a.eval) test = load_mnist(a.data_dir, Split::test);
  }

  RunOptions options;
  if (!a.init.empty()) options.init = a.init;
  if (!a.resume.empty()) options.resume = a.resume;
  if (!a.save.empty()) options.save = a.save;
  if (!a.save_init.empty()) options.save = a.save_init;
  if (a.eval) options.test = &test;
  options.interrupt_folder = interrupt_folder(a.report);
  options.progress = progress;
  if (!a.trace.empty()) options.trace_steps = a.trace_steps;
  options.stop_requested = [] { return stop_signal != 0; };

  const RunResult result = run_training(config, train, options);
  if (!result.primary) return 0;
  if (!a.save_init.empty()) {
    if (!a.quiet) std::printf("initial weights written to %s\n", a.save_init.c_str());
    return 0;
  }

  if (!a.report.empty()) write_json(a.report, make_run_report(config, train, result));
  if (!a.trace.empty()) {
    write_json(a.trace, chrome_trace_json(result.trace, timed_layer_names(config.model)));
  }
  // A diverged run is a failed run: no speed, no summary, exit 1; its report says so.
  if (result.diverged_at_step) {
    std::fflush(stdout);
    std::fprintf(stderr, "cnnbench: error: %s %s: %s%s\n", a.model.c_str(), a.strategy.c_str(),
                 divergence_text(*result.diverged_at_step, result.diverged_loss).c_str(),
                 a.save.empty() ? "" : " (no checkpoint written: the weights are not finite)");
    return 1;
  }
  if (!a.quiet) {
    std::FILE* out = a.report == "-" ? stderr : stdout;
    // The report's names and values: metrics.last_step_loss and metrics.epoch_mean_loss.
    std::fprintf(out, "%s %s: %lld steps, %.0f images/s, %.2f s, last step loss %.4f, epoch mean loss %.4f",
                 a.model.c_str(), a.strategy.c_str(), static_cast<long long>(result.steps_run),
                 result.images_per_s, result.train_seconds, result.last_step_loss, result.epoch_mean_loss);
    if (result.test) std::fprintf(out, ", test accuracy %.2f%%", 100.0 * result.test->accuracy);
    if (result.interrupted) std::fprintf(out, " (interrupted at step %lld)",
                                         static_cast<long long>(result.progress.global_step));
    std::fprintf(out, "\n");
    if (result.time_breakdown.workers.size() > 1) {
      std::fprintf(out, "%s\n", straggler_line(result.time_breakdown).c_str());
    }
  }
  if (result.interrupted) {
    std::fprintf(stderr, "cnnbench: interrupted: checkpoint at step %lld written to %s; continue "
                 "with --resume %s\n", static_cast<long long>(result.progress.global_step),
                 result.saved->c_str(), result.saved->c_str());
    // Another rank's signal stops this one too (cluster ranks agree): report it as SIGINT.
    return 128 + (stop_signal != 0 ? static_cast<int>(stop_signal) : SIGINT);
  }
  return 0;
}

}  // namespace

void add_train_command(CLI::App& root, Runner& runner) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = root.add_subcommand("train", "Train one model with one strategy");
  cmd->add_option("--model", args->model, "fc3 or lenet5")
      ->check(CLI::IsMember(model_choices()))
      ->capture_default_str();
  cmd->add_option("--strategy", args->strategy, "serial, blas, stream, cluster or gpu")
      ->capture_default_str();
  add_common_flags(cmd, *args, OptionFlags::train);
  add_number_option(cmd, general_option::weight_decay, args->weight_decay)->capture_default_str();
  add_number_option(cmd, general_option::threads, args->threads, "--threads,--cores")
      ->capture_default_str();
  cmd->add_flag("--no-shuffle", args->no_shuffle, "visit samples in file order");
  cmd->add_option("--init", args->init, "initial weights (safetensors)")
      ->check(input_path_rule(PathKind::file, true));
  cmd->add_option("--save", args->save, "write a checkpoint at the end (safetensors)");
  cmd->add_option("--resume", args->resume, "continue from a checkpoint")
      ->check(input_path_rule(PathKind::file, true));
  cmd->add_flag("--eval", args->eval, "report test-set accuracy at the end");
  cmd->add_option("--report", args->report, "write the JSON run report here ('-' = stdout)");
  cmd->add_option("--trace", args->trace,
                  "write the last steps' phases of every thread here, as a Chrome trace "
                  "(serial, blas, stream and cluster; Perfetto or chrome://tracing opens it)");
  cmd->add_option("--trace-steps", args->trace_steps, "steps a --trace keeps, the last ones")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{100000}))
      ->capture_default_str();
  cmd->add_option("--save-init", args->save_init,
                  "write the initial weights (seeded, or --init's) as a checkpoint and train nothing")
      ->excludes("--steps")
      ->excludes("--epochs")
      ->excludes("--save")
      ->excludes("--resume")
      ->excludes("--report")
      ->excludes("--trace")
      ->excludes("--eval");
  cmd->add_option("--progress", args->progress,
                  "bar, lines or none (default: a bar on a terminal, lines under mpirun, else none; "
                  "none with --quiet)")
      ->check(CLI::IsMember({"bar", "lines", "none"}));
  cmd->callback([args, cmd, &runner] {
    take_isa_from_environment(cmd, args->isa);
    if (progress_mode(*args) == ProgressMode::bar && !::isatty(STDERR_FILENO)) {
      const std::string problem = columns_environment_problem();  // the bar's width, then
      if (!problem.empty()) throw CLI::ValidationError(problem);
    }
    // Cluster ranks on one node share its cores; other strategies run one process.
    const int ranks = args->strategy == "cluster" ? ranks_on_this_node() : 1;
    check_threads("--threads", args->threads, ranks, args->batch, args->oversubscribe);
    if (!args->trace.empty() && args->strategy == "gpu") {
      throw CLI::ValidationError("--trace", "the gpu strategy records no spans yet (serial, "
                                            "blas, stream and cluster do)");
    }
    runner = [args] { return run_train(*args); };
  });
}

}  // namespace cnnbench::cli
