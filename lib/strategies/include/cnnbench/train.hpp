// Training driver and the strategy interface. The driver owns the schedule (which samples each
// step uses, per DESIGN.md), checkpoints, evaluation and the report; a strategy only runs steps.
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
#include "cnnbench/topology.hpp"

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
  // Strategy-specific options, parsed by the strategy; keys as the CLI flags without dashes:
  // serial: "pin-core"; stream: "consistency", "microbatches", "graph"; cluster: "overlap",
  // "balance", "slowdown";
  // gpu: "gpu-data", "device". Unknown or invalid values -> Error naming the flag.
  std::map<std::string, std::string> options;
};

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
  virtual std::vector<PinRecord> pin_map() const { return {}; }
  // False on every MPI rank but rank 0: only the primary prints, saves checkpoints and reports.
  virtual bool is_primary() const { return true; }
  // Called by every process between ranges with its own stop request (SIGINT/SIGTERM); returns
  // whether the whole job stops now. Multi-process strategies agree (any rank asked -> all stop)
  // so that no rank waits in a collective for one that left.
  virtual bool agree_to_stop(bool requested) { return requested; }
};

struct StrategyInfo {
  std::string name;
  bool available = false;
  std::string reason;  // why not, when unavailable
  std::string description;
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
  // Where an interrupted run saves its checkpoint when --save was not given.
  std::filesystem::path interrupt_save = "cnnbench-interrupted.safetensors";
  const Dataset* test = nullptr;                // --eval
  bool progress_bar = false;
  std::function<bool()> stop_requested;         // polled between ranges (SIGINT/SIGTERM)
};

struct EpochRecord {
  std::int64_t epoch = 0;
  std::int64_t steps = 0;
  double mean_loss = 0;
  double seconds = 0;
};

struct RunResult {
  explicit RunResult(ModelKind kind) : model(kind) {}
  Model model;
  TrainProgress progress;
  std::vector<double> step_losses;  // of the steps run in this invocation
  std::vector<EpochRecord> epochs;
  double train_seconds = 0;         // wall time of the steps (excludes loading and evaluation)
  std::int64_t steps_run = 0;
  double images_per_s = 0;
  std::optional<EvalResult> test;
  bool interrupted = false;
  std::optional<std::filesystem::path> saved;  // the checkpoint written, if any
  nlohmann::json strategy_metrics;
  std::vector<PinRecord> pins;
  bool primary = true;              // false on MPI ranks other than 0
};

// Runs a whole training job as `cnnbench train` does.
RunResult run_training(const TrainConfig& config, const Dataset& train, const RunOptions& options);
// The run report (schema_version 1) of a finished run.
nlohmann::json make_run_report(const TrainConfig& config, const Dataset& train,
                               const RunResult& result);

}  // namespace cnnbench
