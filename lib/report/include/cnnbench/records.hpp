// Sweep reports as typed records: one point (PointRecord) and the sweep around it (SweepRecord),
// with what the analysis derives from them. The sweep runner fills them, the analysis and compare
// read them, and records.cpp alone turns them into JSON and back: the report's key names live
// there (and in the schema, results/schema/sweep-report.schema.json, and the plot script).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cnnbench/report.hpp"

namespace cnnbench {


// The serial repetitions a point's own took turns with, and the ratios of the pairs.
struct PairedBaselineRecord {
  std::optional<int> core;  // the serial point's core; none when unpinned
  std::vector<double> times_s, warmup_times_s;
  std::vector<double> ratios;  // serial time / point time per image, pair by pair
  std::optional<std::int64_t> steps;  // the serial repetitions' steps (the baseline point's)
};

// How a point's steps per repetition were calibrated (SweepOptions::min_time): the probes run,
// each of `steps` steps taking `seconds`; the last probe's steps are the point's.
struct CalibrationProbeRecord {
  std::int64_t steps = 0;
  double seconds = 0;
};
struct CalibrationRecord {
  double min_time_s = 0;
  std::vector<CalibrationProbeRecord> probes;
};

// The serial baseline's repetitions on one of the cores it ran on.
struct CoreSeriesRecord {
  int core = 0;
  std::vector<double> times_s;
  Summary images_per_s;
};
struct BaselineCoresRecord {
  int chosen = 0;  // the fastest core, whose repetitions are the point's times
  std::vector<CoreSeriesRecord> per_core;
};

// How a launched job (a cluster point, the allreduce benchmark) was started: the launcher
// ("mpirun" or "srun") and the job's exact command line.
struct LaunchRecord {
  std::string launcher;
  std::vector<std::string> command;
};

// A repetition that ran while a core it used was slow: a core probe next to its round
// (core_probe.hpp) measured that core more than slow_core_threshold below its median. The
// repetition ran once more after the last round; the retry's times replace the original's when
// the probes around the retry found every core it used at its usual speed.
struct RetryRecord {
  double seconds = 0;                       // the point's repetition
  std::optional<double> baseline_seconds;   // its paired serial repetition
  std::optional<double> ratio;              // their paired ratio
  bool probe_normal = false;                // the probes around the retry were all normal
};
struct SlowCoreWarningRecord {
  int core = 0;           // the slow core
  int round = 0;          // the repetition's round
  int probe = 0;          // the probe that found it slow: probe k runs before round k
  std::optional<int> series_core;  // the baseline's repetitions on this core (baseline_cores)
  double drop = 0;                  // 1 - probe / the core's median probe, the larger of the two
  double compute_drop = 0, memory_drop = 0;
  std::optional<double> handoff_drop;  // of the handoff rate (1 / round trip), where probed
  std::string dropped;              // "compute", "memory", "handoff", or several joined by "and"
  bool every_core = false;          // every core of the machine was slow in it at that probe
  double seconds = 0;               // the original repetition's time
  std::optional<double> baseline_seconds, ratio;  // its pair's
  std::optional<RetryRecord> retry;  // none when the sweep was stopped first
  std::string used;                  // "retry" or "original": whose times the point keeps
  std::string message;
};

// One point of a sweep ("lenet5/stream/n1c2"): what was measured, or why not.
struct PointRecord {
  std::string id, model, strategy;
  std::string series;  // the line it belongs to in the plots: the strategy, "cluster/c<threads>"
  int cores = 1, nodes = 1;
  int p = 1;  // cores x nodes
  std::string status = "ok";  // "ok", "skipped", "failed" or "diverged" (a loss not finite)
  std::string reason;         // why it was skipped or failed
  std::optional<LaunchRecord> launch;  // launched points (cluster): how their jobs were started
  // The PyTorch peers (pytorch, pytorch-ddp): true; absent for cnnbench's own strategies.
  std::optional<bool> peer;
  // A point of its own settings (sweep --tuned's winners): the strategy options it ran with over
  // the sweep's, and what the tune said of it (tuned_points.cpp); null otherwise. A default point
  // that a tune kept as its winner carries `tuned` too, with "default": true.
  nlohmann::json options, tuned;
  // Derived by add_scaling_analysis on every point: its images/s over those of the PyTorch
  // one-thread point (pytorch/n1c1) of the same model; none without such a point.
  std::optional<double> vs_pytorch_1thread;
  // Measured points ("ok"):
  std::vector<double> times_s, warmup_times_s;
  Summary time;
  std::optional<Summary> images_per_s;
  std::optional<std::int64_t> steps;  // per repetition
  std::optional<int> batch;
  std::optional<double> final_loss;
  nlohmann::json strategy_metrics, pin_map;  // as the strategy reports them; null when absent
  // The repetition that stands for the point: the one whose time is the median
  // (median_repetition(times_s), an index into times_s); strategy_metrics, pin_map, final_loss,
  // time_breakdown and straggler are its. time_breakdown and straggler are the run report's
  // metrics.time_breakdown and metrics.straggler (null when the strategy measures none).
  std::optional<int> median_repetition;
  nlohmann::json time_breakdown, straggler;
  std::optional<std::string> noise_warning;  // noise_warning(time_breakdown), when it warns
  // When the middle half of its paired ratios spans more than a tenth of their median (5 or more
  // pairs): how wide, and what the probes said meanwhile (the analysis, sweep_analysis.cpp).
  std::optional<std::string> spread_warning;
  std::optional<std::string> trace;           // sweep --trace-dir: the point's Chrome trace file
  std::optional<BaselineCoresRecord> baseline_cores;
  std::optional<PairedBaselineRecord> paired_baseline;
  nlohmann::json time_to_accuracy;  // measure_time_to_accuracy's result; null when not measured
  // Peer points: what ran (torch_version, blas, onednn, isa_cap, threads, backend, command); null
  // for cnnbench's own strategies.
  nlohmann::json peer_info;
  std::optional<CalibrationRecord> calibration;  // none when the steps were given
  // The sweep's round each repetition ran in (times_s order), and when it started (seconds
  // from the sweep's start): the rounds interleave the points' repetitions (config "order").
  std::vector<int> rounds;
  std::vector<double> started_s;
  // Present only on a point whose sweep was stopped before its last round: the rounds it has.
  // --resume measures such a point again from its preparation.
  std::optional<int> rounds_done;
  std::vector<SlowCoreWarningRecord> slow_core_warnings;
  // Cluster points: the communication model's step against the measured one
  // (add_cluster_predictions, cnnbench/cluster_prediction.hpp); null when not predicted.
  nlohmann::json prediction;
  // Derived by add_scaling_analysis: speedup is the median of the paired ratios where there are
  // any, else serial median / point median (speedup_unpaired either way); no Karp-Flatt at p = 1.
  std::optional<double> speedup, speedup_unpaired, efficiency, karp_flatt;

  bool measured() const { return status == "ok"; }
  // Images of one repetition (steps x batch); 0 when the report does not say.
  double images() const;
};

struct AmdahlRecord {
  std::string model, series;
  double serial_fraction = 0, rmse_inverse_speedup = 0;
  int points = 0;
};

struct PredictedStepRecord {
  int nodes = 1;
  double step_s = 0, compute_s = 0, allreduce_s = 0, speedup = 0;
};
struct MeasuredVsPredictedRecord {
  int nodes = 1;
  double measured_speedup = 0, predicted_speedup = 0;
};
// The cluster scaling prediction of one model (see README, "scaling model").
struct ScalingPredictionRecord {
  std::string model;
  bool available = false;
  std::string reason;         // why not, when not available
  double gradient_bytes = 0;  // 4 x the model's parameters: what every step's allreduce moves
  int batch = 0;
  double one_node_step_s = 0, serial_step_s = 0;
  std::string one_node_step_source;
  double alpha_s = 0, beta_s_per_byte = 0;
  std::vector<PredictedStepRecord> predicted;
  std::vector<MeasuredVsPredictedRecord> measured_vs_predicted;
};

struct BeatenPoint {
  std::string id;
  double speedup = 0;  // over serial
};
struct BaselineWarningRecord {
  std::vector<BeatenPoint> points;
  double margin = 0;
  std::string message;
};

// The core probes (lib/sweep/core_probe.hpp): a fixed compute loop and a memory stream pinned to
// each core in turn, before the first round and after every round. Probe k runs before round k.
struct CoreProbeRecord {
  int probe = 0;
  int core = 0;
  double compute_gflops = 0, memory_gbps = 0;
  double started_s = 0;  // from the sweep's start
  // A cache line's round trip between this core and the machine's first (none for the first core
  // itself, on a one-core machine, and in older reports).
  std::optional<double> handoff_ns;
};
struct CoreMedianRecord {
  int core = 0;
  double compute_gflops = 0, memory_gbps = 0;
  // Each rate's robust relative spread over the sweep (1.4826 MAD / median; none under 5 probes)
  // and the drop below the median that marks the core slow in it (at least CoreProbesRecord's
  // threshold). Older reports have neither: their threshold is CoreProbesRecord's.
  std::optional<double> compute_spread, memory_spread;
  std::optional<double> compute_threshold, memory_threshold;
  // The median handoff round trip with the first core, its spread and threshold (of the handoff
  // rate, 1 / round trip), where the core was probed for it.
  std::optional<double> handoff_ns, handoff_spread, handoff_threshold;
};
struct CoreProbesRecord {
  double threshold = 0;  // the least drop below a core's median that marks the core slow
  std::vector<CoreProbeRecord> probes;
  std::vector<CoreMedianRecord> medians;
};

// Where the probes' handoffs say the cores sit (add_scaling_analysis): apart, a cache line's round
// trip over core_apart_handoff_ns at the median (no cache level shared: two dies), or moved, its
// slowest probe core_moved_handoff_ratio times its fastest or more (a host that placed a virtual
// core elsewhere during the sweep). Every byte a point moves between its cores pays for it.
struct CorePlacementRecord {
  int core = 0, partner = 0;  // the probed core and the one it passed the line to
  double handoff_ns_min = 0, handoff_ns_median = 0, handoff_ns_max = 0;
  bool apart = false, moved = false;
  std::vector<int> near_probes, far_probes;  // moved: the probes on either side of the midpoint
  std::string message;
};
inline constexpr double core_apart_handoff_ns = 200;
inline constexpr double core_moved_handoff_ratio = 2;
// The pair of the slowest median handoff (a pair that moved before a slower steady one), message
// empty; none without a probe that timed a handoff (sweep_analysis.cpp).
std::optional<CorePlacementRecord> slowest_core_pair(const CoreProbesRecord& core_probes);

// A sweep report. context (the machine and build, collect_context), config (the sweep's settings),
// features and allreduce (allreduce-bench's output) are kept as the JSON objects they are made as.
struct SweepRecord {
  bool complete = false;     // every point of the plan ran and none failed
  bool interrupted = false;  // stopped by a signal
  nlohmann::json context = nlohmann::json::object();
  nlohmann::json config = nlohmann::json::object();
  nlohmann::json features;   // null when absent
  nlohmann::json allreduce;  // null: not measured; {"ranks", "reason"} when it failed
  std::vector<PointRecord> points;
  std::vector<AmdahlRecord> amdahl;
  std::vector<ScalingPredictionRecord> scaling_prediction;
  std::optional<BaselineWarningRecord> baseline_warning;
  // Points whose pairs ran on a core whose serial repetitions were, over the whole sweep, slower
  // than the baseline's fastest core by more than `margin` (each point's `speedup` here is its
  // speedup as paired; the message says by how much the pairs' core flatters it).
  std::optional<BaselineWarningRecord> pair_core_warning;
  std::optional<CoreProbesRecord> core_probes;  // none when the sweep took no round
  std::optional<CorePlacementRecord> core_placement;  // none when the cores sit close and stayed
  std::optional<double> elapsed_s;

  // The point with this id ("lenet5/serial/n1c1") if it was measured, else nullptr.
  const PointRecord* find_measured(const std::string& id) const;
  // The points that failed or diverged: the sweep exits 1 and is incomplete.
  std::vector<const PointRecord*> failed_points() const;
};

// to_json / from_json of every record above (records.cpp). Reading is lenient beyond what
// read_report checks: a field of the wrong type is left at its default.
#define CNNBENCH_RECORD_JSON(Record)                           \
  void to_json(nlohmann::json& out, const Record& record);     \
  void from_json(const nlohmann::json& in, Record& record);
CNNBENCH_RECORD_JSON(Summary)
CNNBENCH_RECORD_JSON(PairedBaselineRecord)
CNNBENCH_RECORD_JSON(CoreSeriesRecord)
CNNBENCH_RECORD_JSON(CalibrationProbeRecord)
CNNBENCH_RECORD_JSON(CalibrationRecord)
CNNBENCH_RECORD_JSON(BaselineCoresRecord)
CNNBENCH_RECORD_JSON(LaunchRecord)
CNNBENCH_RECORD_JSON(RetryRecord)
CNNBENCH_RECORD_JSON(SlowCoreWarningRecord)
CNNBENCH_RECORD_JSON(PointRecord)
CNNBENCH_RECORD_JSON(CoreProbeRecord)
CNNBENCH_RECORD_JSON(CoreMedianRecord)
CNNBENCH_RECORD_JSON(CoreProbesRecord)
CNNBENCH_RECORD_JSON(CorePlacementRecord)
CNNBENCH_RECORD_JSON(AmdahlRecord)
CNNBENCH_RECORD_JSON(PredictedStepRecord)
CNNBENCH_RECORD_JSON(MeasuredVsPredictedRecord)
CNNBENCH_RECORD_JSON(ScalingPredictionRecord)
CNNBENCH_RECORD_JSON(BeatenPoint)
CNNBENCH_RECORD_JSON(BaselineWarningRecord)
CNNBENCH_RECORD_JSON(SweepRecord)
#undef CNNBENCH_RECORD_JSON

// A run report (`cnnbench train --report`) seen as a sweep of one point, so that compare can put
// it beside a sweep: the point's one repetition is the run's train_seconds; complete unless the
// run was interrupted.
SweepRecord run_as_sweep(const nlohmann::json& run_report);
// A report read_report accepted, of either kind, as a SweepRecord.
SweepRecord as_sweep_record(const nlohmann::json& report);

// One setting of a report that changes what a repetition measures, as text ("batch", "64").
struct Setting {
  std::string name, value;
};
// The settings of a report's config that must match for its times to compare with another's:
// batch, steps and epochs per repetition, learning rate, momentum, weight decay, data source and
// size, pinning, SIMD target, warm-up and the strategy options (the grid, repetition count,
// seed and launcher are not among them). Sweep and run reports give the same names.
std::vector<Setting> comparable_settings(const nlohmann::json& config);

}  // namespace cnnbench
