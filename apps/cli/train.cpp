// `cnnbench train`: one training run of one strategy, with a progress bar, a one-line summary and
// an optional JSON report and checkpoint.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>

#include "cnnbench/core.hpp"
#include "cnnbench/isa_choice.hpp"
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
  bool no_shuffle = false, eval = false, force = false;
  std::string init, save, resume, report, trace;
  std::string save_init;  // write the initial weights and train nothing (no step: no loss, no speed)
  int threads = 1;
  int shards = 1;
  bool shard_data = false;
  std::int64_t trace_steps = 20;
  std::int64_t checkpoint_every = 0;  // 0: only at the end
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

// The job's rank count as the MPI launcher says it (before MPI is initialised), else 1.
int launcher_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", "SLURM_NTASKS"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != 0) return std::atoi(value);
  }
  return 1;
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

// This process's block under --shard-data (the launcher's rank), else 0.
int shard_data_rank(const TrainConfig& config) {
  return config.shard_data ? std::max(0, launcher_rank()) : 0;
}

// The training set, or with --shard-data only this rank's block of it (docs/cluster.md,
// "Per-node data"): of the synthetic sequence, a byte range of the IDX files, or the rank's folder
// of a set written by datasets/shard.sh.
Dataset load_training_set(const TrainArgs& a, const TrainConfig& config) {
  const int blocks = config.shard_data ? config.shards : 1, block = shard_data_rank(config);
  if (a.synthetic > 0) {
    return blocks == 1 ? make_synthetic(a.synthetic, a.seed)
                       : make_synthetic_block(a.synthetic, a.seed, blocks, block);
  }
  if (is_shard_folder_set(a.data_dir)) {
    if (!config.shard_data) {
      fail("--data " + a.data_dir + " holds shard folders (datasets/shard.sh): train on them "
           "with --strategy cluster --shard-data under mpirun, or pass the MNIST folder");
    }
    return load_mnist_shard_folder(a.data_dir, blocks, block);
  }
  return blocks == 1 ? load_mnist(a.data_dir, Split::train)
                     : load_mnist_block(a.data_dir, Split::train, blocks, block);
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : separator) + item;
  return text;
}

// Whether the run saves to the checkpoint it resumes from (by any spelling): it continues that run
// in place, as a requeued Slurm job rerunning its command does.
bool continues_in_place(const TrainArgs& a) {
  return !a.save.empty() && !a.resume.empty() && same_file(a.save, a.resume);
}

// The files a run writes and reads, for the output rule (check_outputs): each output is checked
// before any work, none may be another output or an input, and none may replace an existing file
// without --force, but for a run that continues in place: the outputs it replaces are that run's
// own (an interrupted run writes its checkpoint and report).
std::vector<OutputPath> train_outputs(const TrainArgs& a, const TrainConfig& config) {
  const bool replace = a.force || continues_in_place(a);
  std::vector<OutputPath> outputs;
  if (!a.report.empty()) outputs.push_back({.option = "--report", .path = a.report, .replace = replace});
  if (!a.save.empty()) outputs.push_back({.option = "--save", .path = a.save, .replace = replace});
  if (!a.save_init.empty()) outputs.push_back({.option = "--save-init", .path = a.save_init, .replace = replace});
  if (!a.trace.empty()) outputs.push_back({.option = "--trace", .path = a.trace, .replace = replace});
  for (const auto& [name, value] : config.options) {
    if (const OptionSpec* spec = find_option_spec(name); spec != nullptr && spec->output_file) {
      outputs.push_back({.option = spec->flag(), .path = value, .replace = replace});
    }
  }
  if (a.save.empty() && a.save_init.empty()) {
    // The longest name an interrupted run's checkpoint can have (run_training names it, never
    // one that exists).
    outputs.push_back({.option = "the folder an interrupted run saves its checkpoint in (pass --save to choose)",
                       .path = interrupt_folder(a.report), .folder = true,
                       .files = {"cnnbench-interrupted-step-9223372036854775807-999.safetensors"}, .replace = true});
  }
  return outputs;
}
// The checkpoint a run continues in place is its --save as well: that output is not checked
// against it (any other output that names it names --save too, which check_outputs refuses).
std::vector<InputPath> train_inputs(const TrainArgs& a) {
  std::vector<InputPath> inputs = {{"--init", a.init}};
  if (!continues_in_place(a)) inputs.push_back({"--resume", a.resume});
  if (a.synthetic == 0) inputs.push_back({"--data", a.data_dir});
  for (InputPath& cache : isa_inputs(a.isa)) inputs.push_back(std::move(cache));
  return inputs;
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
  c.shard_data = a.shard_data;
  c.shards = a.shard_data ? launcher_size() : a.shards;
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
  check_outputs(train_outputs(a, config), train_inputs(a));
  use_isa(a.isa);
  const std::size_t test_samples =
      !a.eval ? 0 : a.synthetic > 0 ? std::max<std::size_t>(a.synthetic / 6, 1000) : 10000;
  // One worker's share (the whole batch): what any strategy needs at least.
  check_memory_for(a, PointSpec{config.model, a.strategy, 1, 1}, test_samples);
  Dataset train = load_training_set(a, config), test;
  if (a.eval && a.synthetic > 0) {
    test = make_synthetic(test_samples, a.seed, a.synthetic);
  } else if (a.eval) {
    // A set of shard folders carries the test files in each folder.
    const std::filesystem::path dir = a.data_dir;
    const bool folders = is_shard_folder_set(dir);
    test = load_mnist(folders ? dir / ("shard-" + std::to_string(shard_data_rank(config))) : dir,
                      Split::test);
  }

  RunOptions options;
  if (!a.init.empty()) options.init = a.init;
  if (!a.resume.empty()) options.resume = a.resume;
  if (!a.save.empty()) options.save = a.save;
  options.checkpoint_every = a.checkpoint_every;
  if (!a.save_init.empty()) options.save = a.save_init;
  if (a.eval) options.test = &test;
  options.interrupt_folder = interrupt_folder(a.report);
  options.progress = progress;
  if (!a.trace.empty()) options.trace_steps = a.trace_steps;
  options.stop_requested = [] { return stop_signal != 0; };
  options.save_error_in_result = true;

  const RunResult result = run_training(config, train, options);
  if (!result.primary) return 0;
  if (!a.save_init.empty()) {
    if (!result.save_error.empty()) fail(result.save_error);
    if (!a.quiet) std::printf("initial weights written to %s\n", a.save_init.c_str());
    return 0;
  }

  // Each output on its own: one that cannot be written (a full disk) keeps no other from being
  // written. Each failure is an error line now; the summary lists what was and was not written.
  std::vector<std::string> written, not_written;
  const auto attempt = [&](const std::string& what, const std::function<void()>& write) {
    try {
      write();
      written.push_back(what);
    } catch (const Error& e) {
      std::fprintf(stderr, "cnnbench: error: %s\n", e.what());
      not_written.push_back(what);
    }
  };
  if (result.saved) {
    const std::string what = (a.save.empty() ? "checkpoint " : "--save ") + result.saved->string();
    attempt(what, [&] { CNNBENCH_CHECK(result.save_error.empty(), result.save_error); });
  }
  if (!a.report.empty()) {
    attempt("--report " + a.report, [&] { write_json(a.report, make_run_report(config, train, result)); });
  }
  if (!a.trace.empty()) {
    attempt("--trace " + a.trace, [&] {
      write_json(a.trace, chrome_trace_json(result.trace, timed_layer_names(config.model)));
    });
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
    if (!written.empty()) std::fprintf(out, "written: %s\n", join(written, ", ").c_str());
  }
  if (!not_written.empty()) {
    std::fprintf(stderr, "cnnbench: error: not written: %s%s\n", join(not_written, ", ").c_str(),
                 written.empty() ? "" : ("; written: " + join(written, ", ")).c_str());
  }
  if (result.interrupted && result.save_error.empty()) {
    std::fprintf(stderr, "cnnbench: interrupted: checkpoint at step %lld written to %s; continue "
                 "with --resume %s\n", static_cast<long long>(result.progress.global_step),
                 result.saved->c_str(), result.saved->c_str());
    // Another rank's signal stops this one too (cluster ranks agree): report it as SIGINT.
    return 128 + (stop_signal != 0 ? static_cast<int>(stop_signal) : SIGINT);
  }
  return not_written.empty() ? 0 : 1;
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
  CLI::Option* shards_flag = add_number_option(cmd, general_option::shards, args->shards);
  cmd->add_flag("--shard-data", args->shard_data,
                "cluster: each rank reads only its block of the training set, the --shards order "
                "with N = the job's ranks (docs/cluster.md, \"Per-node data\")")
      ->excludes(shards_flag);
  cmd->add_option("--init", args->init, "initial weights (safetensors)")
      ->check(input_path_rule(PathKind::file, true));
  cmd->add_option("--save", args->save,
                  "write a checkpoint at the end (safetensors); naming the --resume checkpoint "
                  "continues that run in place, replacing its outputs without --force")
      ->check(output_path_rule(OutputKind::file));
  add_number_option(cmd, general_option::checkpoint_every, args->checkpoint_every);
  cmd->add_option("--resume", args->resume, "continue from a checkpoint")
      ->check(input_path_rule(PathKind::file, true));
  cmd->add_flag("--eval", args->eval, "report test-set accuracy at the end");
  cmd->add_option("--report", args->report, "write the JSON run report here ('-' = stdout)")
      ->check(output_path_rule(OutputKind::json));
  cmd->add_option("--trace", args->trace,
                  "write the last steps' phases of every thread here, as a Chrome trace "
                  "(gpu: thread 1 is the device stream; Perfetto or chrome://tracing opens it)")
      ->check(output_path_rule(OutputKind::json));
  cmd->add_option("--trace-steps", args->trace_steps,
                  "whole steps a --trace keeps, the last ones, the same on every thread")
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
  add_force_flag(cmd, args->force, "--report, --save, --save-init, --trace or --graph file");
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
    const int shards = args->shard_data ? launcher_size() : args->shards;
    if (args->shard_data && args->strategy != "cluster") {
      throw CLI::ValidationError("--shard-data", "only the cluster strategy reads per-rank blocks "
                                                 "(the others take --shards N)");
    }
    if (shards > args->batch) {
      throw CLI::ValidationError(args->shard_data ? "--shard-data" : "--shards",
                                 std::to_string(shards) + " shards but a batch of " +
                                     std::to_string(args->batch) +
                                     " (each shard gives every batch at least one sample)");
    }
    if (args->checkpoint_every > 0 && args->save.empty()) {
      throw CLI::ValidationError("--checkpoint-every", "needs --save FILE, where the checkpoints "
                                                       "are written");
    }
    runner = [args] { return run_train(*args); };
  });
}

}  // namespace cnnbench::cli
