// `cnnbench train`: one training run of one strategy, with a progress bar, a one-line summary and
// an optional JSON report and checkpoint.
#include <unistd.h>

#include <atomic>
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
  std::string init, save, resume, report;
  int threads = 1;
};

std::atomic<bool> stop_signal{false};
extern "C" void on_stop_signal(int) { stop_signal.store(true); }

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
  c.threads = a.threads;
  c.pin = !a.no_pin;
  for (const auto& [name, value] : a.options) {
    if (!value.empty()) c.options[name] = value;
  }
  return c;
}

int run_train(const TrainArgs& a) {
  // Before anything slow, so that an early Ctrl-C also ends in a clean stop.
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  const TrainConfig config = make_config(a);
  use_isa(a.isa);
  Dataset train, test;
  if (a.synthetic > 0) {
    train = make_synthetic(a.synthetic, a.seed);
    if (a.eval) test = make_synthetic(std::max<std::size_t>(a.synthetic / 6, 1000), a.seed, a.synthetic);
  } else {
    train = load_mnist(a.data_dir, Split::train);
    if (a.eval) test = load_mnist(a.data_dir, Split::test);
  }

  RunOptions options;
  if (!a.init.empty()) options.init = a.init;
  if (!a.resume.empty()) options.resume = a.resume;
  if (!a.save.empty()) options.save = a.save;
  if (a.eval) options.test = &test;
  options.progress_bar = !a.quiet && ::isatty(STDERR_FILENO);
  options.stop_requested = [] { return stop_signal.load(); };

  const RunResult result = run_training(config, train, options);
  if (!result.primary) return 0;

  if (!a.report.empty()) write_json(a.report, make_run_report(config, train, result));
  if (!a.quiet) {
    std::FILE* out = a.report == "-" ? stderr : stdout;
    const double loss = result.step_losses.empty() ? 0.0 : result.step_losses.back();
    std::fprintf(out, "%s %s: %lld steps, %.0f images/s, %.2f s, last loss %.4f", a.model.c_str(),
                 a.strategy.c_str(), static_cast<long long>(result.steps_run), result.images_per_s,
                 result.train_seconds, loss);
    if (result.test) std::fprintf(out, ", test accuracy %.2f%%", 100.0 * result.test->accuracy);
    if (result.interrupted) std::fprintf(out, " (interrupted at step %lld)",
                                         static_cast<long long>(result.progress.global_step));
    std::fprintf(out, "\n");
  }
  if (result.interrupted) {
    std::fprintf(stderr, "cnnbench: interrupted: checkpoint at step %lld written to %s; continue "
                 "with --resume %s\n", static_cast<long long>(result.progress.global_step),
                 result.saved->c_str(), result.saved->c_str());
    return 128 + SIGINT;
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
  cmd->add_option("--init", args->init, "initial weights (safetensors)")->check(CLI::ExistingFile);
  cmd->add_option("--save", args->save, "write a checkpoint at the end (safetensors)");
  cmd->add_option("--resume", args->resume, "continue from a checkpoint")->check(CLI::ExistingFile);
  cmd->add_flag("--eval", args->eval, "report test-set accuracy at the end");
  cmd->add_option("--report", args->report, "write the JSON run report here ('-' = stdout)");
  cmd->callback([args, &runner] {
    // Cluster ranks on one node share its cores; other strategies run one process.
    const int ranks = args->strategy == "cluster" ? ranks_on_this_node() : 1;
    check_threads("--threads", args->threads, ranks, args->batch, args->oversubscribe);
    runner = [args] { return run_train(*args); };
  });
}

}  // namespace cnnbench::cli
