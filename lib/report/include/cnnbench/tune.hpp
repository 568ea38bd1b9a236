// `cnnbench tune`: the settings of each strategy planned from one profile of the step, the most
// promising measured as the sweep measures (docs/tune.md). The planner (tune_plan.cpp) is pure: a
// profile in, every candidate's predicted step out, so that it is tested on made-up profiles; the
// profile and the measurement (lib/sweep/tune.cpp) run the strategies.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cnnbench/collective_model.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/records.hpp"

namespace cnnbench {

inline constexpr int tune_schema_version = 1;

// The serial step at one batch size, per step: each timed layer's forward + backward
// (timed_layer_names), the batch's gathering, the SGD update and the rest.
struct BatchProfile {
  int batch = 0;
  std::map<std::string, double> layer_s;
  double data_s = 0, update_s = 0, step_s = 0;
  double rest_s() const;  // step_s less the layers, data and update (>= 0)
};

// What the planner knows of a model on this machine, measured once.
struct TuneProfile {
  ModelKind model = ModelKind::lenet5;
  int batch = 64;
  int cores = 1;
  // Serial at every per-worker batch a candidate gives a worker (the batch, its halves, ...).
  std::vector<BatchProfile> serial;
  // The stream runtime's costs beyond the layers' own work (stream_costs): per actor firing, and
  // per step whatever the firings are (the step's start and end, its layers' other costs).
  double stream_firing_s = 0, stream_fixed_s = 0;
  // Bytes per second of a copy between tokens (a splitjoin's split and join).
  double copy_bytes_per_s = 1e10;
  // The cluster strategy on one rank of one thread: its update per step and what its step costs
  // beyond serial's layers and gathering besides the update (dispatch, clearing the gradient).
  double cluster_update_s = 0, cluster_fixed_s = 0;
  // What a rank's threads on two or more cores cost each other in a step when the whole parameter
  // set crosses between them once (gradients summed from the other cores' buffers, weights read
  // back after another core stepped them): the cluster's default on `cores` threads, profiled,
  // beyond its prediction without this term (cross_core_seconds). The one-core profile cannot
  // see it.
  double cross_core_s = 0;
  // The blas strategy's step at 1 thread and at `cores` threads.
  double blas_step_1_s = 0, blas_step_p_s = 0;
  // The cluster over `nodes` hosts (one rank each): the link between them, from allreduce-bench's
  // fit of the strategy's own call (the in-place MPI_Iallreduce on the ring), and the cores of
  // the one machine all the ranks share (emulated hosts; 0: each host has its own cores).
  int nodes = 1;
  std::optional<CollectiveCost> link;
  int machine_cores = 0;
  // The links' tbf where --rate caps them (scripts/emulate-hosts.sh's bucket at that rate): what
  // the link saves while the step computes goes out at its own speed (predict_step).
  std::optional<TokenBucket> token_bucket;

  // The layers' time at batch b: measured where profiled, else interpolated linearly between the
  // nearest profiled batches (extrapolated proportionally beyond them).
  const BatchProfile& nearest(int batch) const;
  double layer_seconds(const std::string& layer, int batch) const;
  double data_seconds(int batch) const;
  const BatchProfile& full_batch() const;  // the profile at `batch`
};

// One setting of one strategy: the train/sweep flags that make it.
struct TuneCandidate {
  std::string strategy;
  int cores = 1;  // stream: pinned cores; cluster: threads per rank; blas: OpenBLAS threads
  int nodes = 1;
  std::map<std::string, std::string> options;  // strategy options by name (no dashes)
  bool is_default = false;  // what a sweep measures for this strategy at `cores`
  std::string label;        // "s=1 c1k=2 c2c=1 f1=2 f2=1 f3=1 m=2 static"
  double predicted_step_s = 0;
  std::string bound;  // what the prediction's step is made of: "busiest core", "chain", ...
};

// Every candidate of `strategy` on one node of `cores` cores (docs/tune.md, "The candidate
// space"); the one a sweep measures by default is among them, marked is_default. With nodes > 1
// (the cluster only): ranks on `nodes` hosts of 1..cores threads each, overlap on or off,
// balance static or dynamic, and the node update for more than one thread.
std::vector<TuneCandidate> tune_candidates(ModelKind model, const std::string& strategy, int cores,
                                           int batch, int nodes = 1);
// The batch sizes a worker of any candidate computes: the profile needs serial at each.
std::vector<int> tune_profile_batches(const std::vector<TuneCandidate>& candidates, int batch);
// A worker's batch: the global batch split over the nodes, a rank's share over its threads.
int worker_batch(int batch, int nodes, int threads);
// The stream's profile runs: its paper graph with every width 1 on one core, in `microbatches`
// micro-batches (strict consistency).
TuneCandidate stream_profile_graph(ModelKind model, int microbatches);
// The micro-batches of the second profile run for `batch`: 4, else 2, else 1 (no second run).
int stream_profile_microbatches(int batch);
// The stream's cost per firing and per step from the measured steps of the two profile graphs:
// one micro-batch (step_1_s) and `microbatches` of them (step_m_s, the same samples through more
// firings). What the extra firings add is the cost per firing; what the one-micro-batch step
// costs beyond the planner's prediction of it with those firings is the fixed cost. Both >= 0;
// with microbatches 1 there is one run, and all of its excess is put on the firings.
struct StreamCosts {
  double firing_s = 0, fixed_s = 0;
};
StreamCosts stream_costs(const TuneProfile& profile, double step_1_s, int microbatches,
                         double step_m_s);
// The cross-core cost from `measured_step_s`, the step of the cluster's default on profile.cores
// threads: what it costs beyond the prediction without the term, per crossing of the whole
// parameter set (>= 0; 0 on one core).
double cross_core_seconds(const TuneProfile& profile, double measured_step_s);
// Fills predicted_step_s and bound. Error when the profile lacks what the candidate needs.
void predict_step(const TuneProfile& profile, TuneCandidate& candidate);

// The candidates to measure: every strategy's default and its predicted best, then the next
// best of each strategy in turn (by predicted step), while `cost` of the chosen stays within
// `budget_s`. Indices into `candidates`, in the order chosen.
std::vector<std::size_t> choose_measured(const std::vector<TuneCandidate>& candidates,
                                         const std::function<double(const TuneCandidate&)>& cost,
                                         double budget_s);

// ---- the tune itself (lib/sweep/tune.cpp) -------------------------------------------------------

struct TuneOptions {
  ModelKind model = ModelKind::lenet5;
  int cores = 1;
  std::vector<std::string> strategies = {"stream", "cluster", "blas"};
  double budget_s = 300;  // the whole tune: the profile and the measurements
  // Measure every candidate, not only the most promising, with no budget: the ground truth that
  // the planner's choice and error are judged by (docs/tune.md).
  bool exhaustive = false;
  int repeat = 3, warmup = 1;
  double min_time = 0.2;  // the serial repetition's length the steps per repetition are set for
  int batch = 64;
  float lr = 0.01f, momentum = 0.9f;
  std::uint64_t seed = 1;
  bool pin = true;
  std::string isa = "best";
  std::optional<std::filesystem::path> data_dir;  // MNIST; else synthetic_samples synthetic ones
  std::size_t synthetic_samples = 8192;
  std::string launcher = "mpirun";  // the cluster points' launcher, as the sweep's
  std::vector<std::string> launcher_args;
  std::filesystem::path self;  // this cnnbench binary
  bool quiet = false;
  std::function<bool()> stop_requested;  // Ctrl-C: the report keeps what was measured
  // > 0: the cluster over this many emulated hosts (docs/cluster.md, "Emulated hosts"), one rank
  // each, every link capped at link_rate (tc's units, "" for none); brought up for the whole tune.
  int emulated_hosts = 0;
  std::string link_rate;
};

// The profile, the predictions, the measurements of the chosen candidates paired with serial (a
// sweep of those points) and each strategy's winner: the tune report (results/schema/
// tune-report.schema.json). A stop request ends it early with "interrupted": true.
nlohmann::json run_tune(const TuneOptions& options);

// Each strategy's winner from the tune report's `measured` entries (strategy, status, default,
// speedup, speedup_range, speedup_by_round, ...): its default, unless a candidate measured faster
// than the default: in each of the rounds both ran, where they share tune_rounds_to_judge or more
// (each round's paired speedups side by side), else in every repetition (each paired ratio above
// the default's median speedup); of those, the one of the highest median. null for a strategy
// with nothing measured.
inline constexpr int tune_rounds_to_judge = 4;
nlohmann::json tune_winners(const nlohmann::json& measured, const std::vector<std::string>& strategies);

// The `cnnbench train` command that runs a candidate again for `steps` steps.
std::vector<std::string> tune_command(const TuneOptions& options, const TuneCandidate& candidate,
                                      std::int64_t steps);

}  // namespace cnnbench
