// Training driver and the strategy interface. The driver owns the schedule (which samples each
// step uses, per docs/design.md), checkpoints, evaluation and the report; a strategy only runs steps.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cnnbench/data.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/checkpoint.hpp"
#include "cnnbench/progress.hpp"
#include "cnnbench/time_breakdown.hpp"
#include "cnnbench/topology.hpp"
#include "cnnbench/trace.hpp"

namespace cnnbench {

struct TrainConfig {
  ModelKind model = ModelKind::lenet5;
  std::string strategy = "serial";
  int batch = 64;
  SgdConfig sgd;
  std::uint64_t seed = 1;
  bool shuffle = true;
  std::int64_t steps = -1;   // total optimizer steps of the run (resume included); -1: use epochs
  std::int64_t epochs = 1;   // used when steps < 0
  int threads = 1;           // cores / worker threads a strategy may use
  bool pin = true;
  // --shards N: the sample order of the training set cut into N per-node blocks (docs/design.md,
  // "Sample order"); 1 is the unsharded order. --shard-data (cluster): each rank holds only its
  // block, N being the job's ranks.
  int shards = 1;
  bool shard_data = false;
  // Strategy options as given, keyed by their OptionSpec's name (the CLI flag without dashes);
  // strategy_option_specs() lists them, and each strategy reads its own through them.
  std::map<std::string, std::string> options;
};

// The config as the run report's "config" (without "data") and as a time-to-accuracy job
// carries it; from_json reads what to_json writes.
void to_json(nlohmann::json& out, const TrainConfig& config);
void from_json(const nlohmann::json& in, TrainConfig& config);
// The `cnnbench train` arguments that make the same config (strategy options included).
std::vector<std::string> to_argv(const TrainConfig& config);

// ---- strategy options ---------------------------------------------------------------------------

// The form of a strategy option's value.
enum class OptionKind {
  choice,        // one of OptionSpec::choices
  whole_number,  // a decimal int within the spec's range
  number,        // a decimal number within the spec's range (finite unless allowed otherwise)
  part_factor,   // N:FACTOR, N a whole number >= 0, FACTOR a number within the spec's range
  text,          // free text the strategy checks itself (a file name, a widths list)
};

// One strategy option, declared once: the CLI flags of train and sweep, the sweep's pass-through,
// the checks and their messages, and the reports' config are made from it.
struct OptionSpec {
  std::string name{};  // the CLI flag without dashes, the key in TrainConfig::options
  OptionKind kind = OptionKind::text;
  std::vector<std::string> choices{};  // kind choice
  std::string value_name{};          // in help and messages: "on|off", "N", "FILE", "N:FACTOR"
  std::string value_noun = "value";  // "unknown mode 'x'"
  std::string default_value{};       // as text; "" when there is none
  std::string default_note{};        // the default when the run decides it ("the last core")
  std::string help{};
  std::vector<std::string> strategies{};  // the strategies that read it
  // Range of a number (kind whole_number or number; of FACTOR for part_factor): unset ends are
  // open. `range` says it for people ("> 0", "1..1000").
  std::optional<double> minimum{}, maximum{};
  bool exclusive_minimum = false;
  std::string range{};
  bool finite = true;  // infinities and NaN are refused
  bool output_file = false;  // a file the run writes: checked before any work, like --report
  // The sweep passes it on to the points of its strategies; sweep_default, when set, is the
  // sweep's own default (the report's config records the option either way).
  bool in_sweep = false;
  std::string sweep_default{};

  bool applies_to(const std::string& strategy) const;
  // Whether a number is within the range (and finite when the spec asks for it).
  bool admits(double value) const;
  std::string flag() const { return "--" + name; }
  std::string strategies_text() const;  // "cluster and stream"
  std::string help_text() const;      // "stream: strict, group-async or async"
  std::string default_text() const;   // default_value, or default_note, or ""
};

// Every strategy option, in the order the CLI lists them.
const std::vector<const OptionSpec*>& strategy_option_specs();
// The spec named `name`; nullptr when there is none.
const OptionSpec* find_option_spec(const std::string& name);
// "" when `value` has the spec's form and range, else what is wrong with it, naming the flag
// ("--balance: unknown mode 'even' (expected static or dynamic)").
std::string option_value_problem(const OptionSpec& spec, const std::string& value);
// Error unless every option in `options` is one of `strategy`'s and has a valid value.
void check_strategy_options(const std::map<std::string, std::string>& options,
                            const std::string& strategy);

// The steps a strategy runs in one call: step i (0 <= i < count) uses the samples
// order[(first + i) * batch, (first + i + 1) * batch) of the current epoch.
struct StepRange {
  const std::uint32_t* order = nullptr;
  std::int64_t first = 0;        // step index within the epoch
  std::int64_t count = 0;
  std::int64_t global_first = 0; // optimizer steps done before this range
};
// Called once per finished step, in order, with the mean loss of that step's batch.
using StepCallback = std::function<void(std::int64_t step_in_range, double loss)>;

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // Called once before the first range with the initial (or resumed) model.
  virtual void prepare(const Model& model, const Dataset& train, const TrainConfig& config) = 0;
  virtual void run_steps(const StepRange& range, const StepCallback& on_step) = 0;
  // Copies the current parameters and momentum into model (for checkpoints and evaluation).
  virtual void sync_to(Model& model) = 0;
  // Strategy-specific metrics for the report ("stream": bubbles, staleness, ...).
  virtual nlohmann::json metrics() const { return nlohmann::json::object(); }
  // Where the time of the steps run so far went (docs/design.md, "Where the time goes"); on a
  // multi-rank job every rank's figures, gathered where the ranks last met.
  virtual TimeBreakdown time_breakdown() const { return {}; }
  // Keep every thread's spans of the last `steps` steps for a trace (called after prepare; a
  // strategy that records none ignores it), and hand them over: collective on a multi-rank job,
  // every rank's tracks on rank 0, on rank 0's clock.
  virtual void keep_trace(std::int64_t /*steps*/) {}
  virtual Trace trace() { return {}; }
  virtual std::vector<PinRecord> pin_map() const { return {}; }
  // False on every MPI rank but rank 0: only the primary prints, saves checkpoints and reports.
  virtual bool is_primary() const { return true; }
  // Called by every process between ranges with its own stop request (SIGINT/SIGTERM); returns
  // whether the whole job stops now. Multi-process strategies agree (any rank asked -> all stop)
  // so that no rank waits in a collective for one that left.
  virtual bool agree_to_stop(bool requested) { return requested; }
  // Collective on a multi-process job: every process's text, in rank order, on every process.
  virtual std::vector<std::string> gather_texts(const std::string& mine) { return {mine}; }
};

struct StrategyInfo {
  std::string name;
  bool available = false;
  std::string reason;  // why not, when unavailable
  std::string description;
  std::vector<const OptionSpec*> options;  // the options it reads
};
std::vector<StrategyInfo> list_strategies();
// Error when the name is unknown or the strategy isn't compiled into this build (with why).
std::unique_ptr<Strategy> make_strategy(const std::string& name);

// Evaluation on a data set with the serial forward pass.
struct EvalResult {
  double loss = 0;
  double accuracy = 0;
  std::size_t count = 0;
};
EvalResult evaluate(ModelKind kind, const float* params, const Dataset& data, int batch = 256);

struct RunOptions {
  std::optional<std::filesystem::path> init;    // --init: weights from safetensors
  std::optional<std::filesystem::path> resume;  // --resume: weights, momentum and progress
  std::optional<std::filesystem::path> save;    // --save: checkpoint at the end (or interruption)
  // --checkpoint-every: the primary also writes the checkpoint to `save` after each this many
  // steps of the run (counted from step 0), replacing the last one only once the new one is
  // whole, so that a failure later loses at most these steps. 0: only at the end.
  std::int64_t checkpoint_every = 0;
  // The folder an interrupted run saves its checkpoint in when --save was not given, as
  // cnnbench-interrupted-step-N.safetensors (-2, -3 ... added rather than replacing a file).
  std::filesystem::path interrupt_folder = ".";
  // A checkpoint that cannot be written is an Error, unless this is set: then the run ends as
  // usual and RunResult::save_error says why, so that the caller's other outputs are written.
  bool save_error_in_result = false;
  const Dataset* test = nullptr;                // --eval
  ProgressMode progress = ProgressMode::none;
  std::function<bool()> stop_requested;         // polled between ranges (SIGINT/SIGTERM)
  // Called on every process after each every_steps steps of the run (counted from step 0) and
  // after its last step, with the steps done and the model as the strategy has it; returning
  // true ends the run there (not an interruption). every_steps 0: never.
  std::int64_t every_steps = 0;
  std::function<bool(std::int64_t global_step, const Model& model)> on_every_steps;
  // --trace: keep the spans of the last trace_steps whole steps of every thread (0: none).
  std::int64_t trace_steps = 0;
};

struct EpochRecord {
  std::int64_t epoch = 0;
  std::int64_t steps = 0;
  double mean_loss = 0;
  double seconds = 0;
};

// What one process of the run held of the training set, and its peak memory.
struct ProcessRecord {
  int rank = 0;
  std::size_t first = 0, count = 0;  // its samples: [first, first + count) of the whole set
  std::string source;                // what it read of them ("" when the whole set)
  std::uint64_t peak_rss_bytes = 0;  // getrusage's ru_maxrss at the end of training
};

struct RunResult {
  explicit RunResult(ModelKind kind) : model(kind) {}
  Model model;
  TrainProgress progress;
  std::vector<double> step_losses;  // of the steps run in this invocation
  std::vector<EpochRecord> epochs;
  double train_seconds = 0;         // wall time of the steps (excludes loading and evaluation)
  std::int64_t steps_run = 0;
  std::int64_t total_steps = 0;     // the run's planned length (--steps, or epochs x steps per epoch)
  // What the summary line and the report both show: the loss of the last step run, and the mean
  // over the steps run of the last epoch (a partial one when the run stopped inside it).
  double last_step_loss = 0, epoch_mean_loss = 0;
  double images_per_s = 0;
  std::optional<EvalResult> test;
  bool interrupted = false;
  // The first step (1-based, of the whole run) whose loss was not finite, and that loss: the run
  // stopped at the end of its range and wrote no checkpoint (docs/design.md, "Degenerate runs").
  std::optional<std::int64_t> diverged_at_step;
  double diverged_loss = 0;
  std::optional<std::filesystem::path> saved;  // the checkpoint written (or tried), if any
  std::string save_error;  // with RunOptions::save_error_in_result: why `saved` was not written
  nlohmann::json strategy_metrics;
  TimeBreakdown time_breakdown;
  Trace trace;  // with RunOptions::trace_steps, on the primary: the same whole steps per track
  std::vector<PinRecord> pins;
  std::vector<ProcessRecord> processes;  // every process of the job, in rank order
  bool primary = true;              // false on MPI ranks other than 0
};

// "diverged at step 3 (loss nan); try a smaller --lr": what train, the run report and a sweep's
// point say of a run whose loss stopped being finite.
std::string divergence_text(std::int64_t step, double loss);

// Runs a whole training job as `cnnbench train` does.
RunResult run_training(const TrainConfig& config, const Dataset& train, const RunOptions& options);
// The run report (schema_version 1) of a finished run.
nlohmann::json make_run_report(const TrainConfig& config, const Dataset& train,
                               const RunResult& result);

}  // namespace cnnbench
