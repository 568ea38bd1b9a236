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

namespace cnnbench::cli {

namespace {

struct TrainArgs {
  std::string model = "lenet5";
  std::string strategy = "serial";
  std::string data_dir = "datasets/mnist";
  std::size_t synthetic = 0;
  std::int64_t epochs = 1;
  std::int64_t steps = -1;
  int batch = 64;
  float lr = 0.01f, momentum = 0.9f, weight_decay = 0.0f;
  std::uint64_t seed = 1;
  bool no_shuffle = false, eval = false, quiet = false, no_pin = false;
  std::string init, save, resume, report;
  int threads = 1;
  std::map<std::string, std::string> options;  // strategy options by name; "" = not given
  std::string isa = "best";
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
      ->check(CLI::IsMember({"fc3", "lenet5"}))
      ->capture_default_str();
  cmd->add_option("--strategy", args->strategy, "serial, blas, stream, cluster or gpu")
      ->capture_default_str();
  add_isa_option(cmd, args->isa);
  auto* data = cmd->add_option("--data", args->data_dir, "folder with the MNIST IDX files")
                   ->capture_default_str();
  cmd->add_option("--synthetic", args->synthetic,
                  "use N deterministic synthetic samples instead of MNIST")
      ->check(CLI::PositiveNumber)
      ->excludes(data);
  auto* epochs = cmd->add_option("--epochs", args->epochs, "epochs to train")
                     ->check(CLI::NonNegativeNumber)
                     ->capture_default_str();
  cmd->add_option("--steps", args->steps, "total optimizer steps of the run (resume included)")
      ->check(CLI::NonNegativeNumber)
      ->excludes(epochs);
  cmd->add_option("--batch", args->batch, "mini-batch size")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--lr", args->lr, "learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--momentum", args->momentum, "SGD momentum")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_option("--weight-decay", args->weight_decay, "L2 weight decay")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "seed of the init and the shuffling")->capture_default_str();
  cmd->add_flag("--no-shuffle", args->no_shuffle, "visit samples in file order");
  cmd->add_option("--init", args->init, "initial weights (safetensors)")->check(CLI::ExistingFile);
  cmd->add_option("--save", args->save, "write a checkpoint at the end (safetensors)");
  cmd->add_option("--resume", args->resume, "continue from a checkpoint")->check(CLI::ExistingFile);
  cmd->add_flag("--eval", args->eval, "report test-set accuracy at the end");
  cmd->add_option("--report", args->report, "write the JSON run report here ('-' = stdout)");
  cmd->add_flag("--quiet", args->quiet, "no progress bar and no summary line");
  cmd->add_option("--threads,--cores", args->threads,
                  "cores/threads the strategy may use (stream: cores; cluster: threads per rank)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_flag("--no-pin", args->no_pin, "do not bind worker threads to cores");
  add_strategy_option_flags(cmd, args->options, OptionFlags::train);
  cmd->callback([args, &runner] { runner = [args] { return run_train(*args); }; });
}

}  // namespace cnnbench::cli
