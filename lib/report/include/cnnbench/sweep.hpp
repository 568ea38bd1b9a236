// Sweeps: the speedup statistics (speedup, efficiency, Karp-Flatt, Amdahl fit), the rank test that
// tells a change from noise, the ring-allreduce scaling model, the strict report reader, and the
// sweep runner that measures every point of a grid of models x strategies x cores x nodes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cnnbench/collective_model.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/records.hpp"

namespace cnnbench {

inline constexpr int sweep_schema_version = 1;

// ---- speedup statistics ------------------------------------------------------------------------

// S = T_serial / T_p.
double speedup(double serial_seconds, double parallel_seconds);
// E = S / p.
double efficiency(double speedup_value, int cores);
// Karp-Flatt experimentally determined serial fraction e = (1/S - 1/p) / (1 - 1/p); p must be > 1
// (at p = 1 it is 0/0: Error).
double karp_flatt(double speedup_value, int cores);

// Amdahl's law S(p) = 1 / (f + (1 - f) / p).
double amdahl_speedup(double serial_fraction, double cores);
struct AmdahlFit {
  double serial_fraction = 0;  // f, not clamped: a negative f means super-linear points
  double rmse = 0;             // root mean square error of 1/S over the points
  int points = 0;              // points with p > 1 that entered the fit
};
// Least squares on the linearised law 1/S - 1/p = f (1 - 1/p) over points with p > 1:
// f = sum(x y) / sum(x^2), x = 1 - 1/p, y = 1/S - 1/p. Error when no point has p > 1.
AmdahlFit fit_amdahl(std::span<const int> cores, std::span<const double> speedups);

// ---- one point's repetitions -------------------------------------------------------------------

// The repetition whose time is the median: the middle one of an odd count, the faster of the two
// middle ones of an even count (a real repetition, not an average of two). Ties: the first.
// `times` must not be empty.
std::size_t median_repetition(std::span<const double> times);

// A worker that lost more than this fraction of its wall time to descheduling (another process
// or a hypervisor had its core) makes the point's times a measure of the machine's load.
inline constexpr double descheduled_warning_fraction = 0.10;
// "thread 1 lost 23% of its wall time (0.12 of 0.52 s) to descheduling" for the worker of a run
// report's metrics.time_breakdown that lost the largest fraction, when above
// descheduled_warning_fraction (the critical path's own descheduled_s when it lists no workers);
// nothing when no worker did, or when the breakdown records no descheduled_s (older reports).
std::optional<std::string> noise_warning(const nlohmann::json& time_breakdown);

// ---- Mann-Whitney U rank test ------------------------------------------------------------------

struct MannWhitney {
  double u = 0;        // U of the first sample: pairs (a_i, b_j) with a_i > b_j, ties count 1/2
  double p_value = 1;  // two-sided
  bool exact = false;  // exact null distribution (no ties, n1 + n2 <= 30) or normal approximation
  // The smallest two-sided p-value these sample sizes can give: when it is above the chosen
  // significance level the test cannot call any difference significant.
  double min_p_value = 1;
};
// Two-sided test of "a and b come from the same distribution". Exact: the null distribution of U
// counted over all C(n1+n2, n1) rank assignments, p = min(1, 2 min(P(U <= u), P(U >= u))).
// Otherwise: normal approximation with tie-corrected variance and a 0.5 continuity correction.
MannWhitney mann_whitney_u(std::span<const double> a, std::span<const double> b);

// ---- scaling model -----------------------------------------------------------------------------

// Data-parallel step time on p nodes with a fixed global batch B (strong scaling):
// T(p) = t_step * ceil(B / p) / B + a ring allreduce of gradient_bytes over p ranks at `cost`
// (collective_model.hpp), t_step = measured time of one step on one node; a node cannot compute
// less than one sample, so beyond B nodes the compute term stops shrinking.
double predicted_step_seconds(double one_node_step_seconds, int batch, int nodes,
                              double gradient_bytes, const CollectiveCost& cost);

// ---- reports -----------------------------------------------------------------------------------

// Reads a sweep report (kind "sweep") or a run report (kind "run") and checks every field that
// compare and plot rely on: its presence, type and range. Malformed files -> FormatError /
// Error naming the file and the field ("points[3].times_s[1]: expected a positive number").
nlohmann::json read_report(const std::filesystem::path& path);

// Reads a `cnnbench tune` report (kind "tune") as `sweep --tuned` uses it: its model, cores,
// nodes, batch and each strategy's winner (label, options, cores, nodes, speedups) checked; a tune
// that was interrupted is refused (its winners were never measured). Errors name the file and field.
nlohmann::json read_tune_report(const std::filesystem::path& path);

// The measured points ("status": "ok") of a report that read_report accepted, of either kind.
std::vector<PointRecord> report_points(const nlohmann::json& report);

struct ComparedPoint {
  std::string id;
  // new_median_s is scaled to the base's work per repetition (steps x batch) when both reports
  // say what it was, so that runs of different lengths compare: work_scale = base / new images.
  double base_median_s = 0, new_median_s = 0;
  double work_scale = 1;
  double ratio = 0;  // new / base median time: > 1 is slower
  double u = 0, p_value = 1;  // the Mann-Whitney U test of the (scaled) repetitions
  bool exact = false;
  bool significant = false;           // p < alpha
  bool decided_by_threshold = false;  // too few repetitions for any p < alpha: the threshold decides
  bool regression = false;   // ratio > 1 + threshold, and significant or decided_by_threshold
  bool improvement = false;  // ratio < 1 - threshold, and significant or decided_by_threshold
  // A PyTorch peer (pytorch, pytorch-ddp): compared and printed, but never the gate's regression.
  bool peer = false;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ComparedPoint, id, base_median_s, new_median_s, work_scale, ratio,
                                   u, p_value, exact, significant, decided_by_threshold, regression,
                                   improvement, peer)

// One way in which two reports differ that makes their times incomparable as a measure of the
// code alone: the machine or build (MachineDifference) or a setting of the run (config).
struct ReportDifference {
  std::string item;  // "CPU", "SIMD target", "batch", "data source", ...
  std::string base, candidate;
  std::string describe() const;  // "SIMD target: avx2 (base) vs avx3 (new)"
};
using MachineDifference = ReportDifference;
// What differs between the contexts of two reports: the CPU (vendor, family, model,
// microarchitecture; cpu_model when a report predates the cpu object), the core count, the SIMD
// target, the OpenBLAS core type, the compiler and the build flags. An item one report does not
// record (older reports lack simd and openblas) is not compared.
std::vector<MachineDifference> machine_differences(const nlohmann::json& base,
                                                   const nlohmann::json& candidate);
// The comparable_settings (records.hpp) of two reports' configs that differ; a setting one report
// does not record is not compared.
std::vector<ReportDifference> config_differences(const nlohmann::json& base,
                                                 const nlohmann::json& candidate);

struct Comparison {
  std::vector<ComparedPoint> points;           // in the order of the base report
  std::vector<std::string> only_in_base, only_in_new;
  std::vector<MachineDifference> machine_differences;
  std::vector<ReportDifference> config_differences;
  // Why a report cannot stand for a whole measurement: "base: incomplete (...)", "new: point
  // fc3/stream/n1c2 failed: ..."; any of them makes compare exit 1. A failed peer point is none
  // of them.
  std::vector<std::string> unfinished;
  double threshold = 0.05;
  double alpha = 0.05;
  bool any_regression() const;  // of a point that is not a peer
};
Comparison compare_reports(const nlohmann::json& base, const nlohmann::json& candidate,
                           double threshold, double alpha);
// A point's verdict as compare prints it: REGRESSION, faster, noise (beyond the threshold but not
// significant) or same.
const char* comparison_verdict(const ComparedPoint& point, double threshold);
// compare's last line: what the test said. A regression the rank test could not tell from noise
// (too few repetitions) is said as such, never as "beyond noise".
std::string comparison_summary(const Comparison& comparison);
// compare --json: the Comparison with each point's verdict and the summary line.
nlohmann::json comparison_json(const Comparison& comparison);

// Fills in the derived numbers of a sweep from its measured points: per point speedup,
// efficiency and Karp-Flatt (against the serial point of the same model), the Amdahl fits (one
// per model and series), the scaling prediction (needs an allreduce fit from > 1 rank) and the
// baseline warning.
void add_scaling_analysis(SweepRecord& sweep);
// The same on a report as JSON.
void add_scaling_analysis(nlohmann::json& report);

// ---- the sweep runner --------------------------------------------------------------------------

// How a sweep starts its MPI jobs: Open MPI's (or MPICH's) mpirun, or Slurm's srun inside an
// allocation.
enum class LauncherKind { mpirun, srun };
inline const char* launcher_kind_name(LauncherKind kind) {
  return kind == LauncherKind::srun ? "srun" : "mpirun";
}
// The CPUs of the Slurm allocation this process runs in, from SLURM_JOB_CPUS_PER_NODE ("4",
// "4(x2),2"); 0 outside an allocation or when the variable cannot be read (lib/sweep).
int slurm_allocation_cpus();

// A test hook, not a measurement setting: the core probe of `core` at probe `probe` (probe k runs
// before round k) does `factor` times the work it counts, as a core that slowed down would, so
// that tests can reach the slow-core warning. From CNNBENCH_TEST_PROBE_SLOWDOWN=CORE:PROBE:FACTOR
// with an optional :compute or :memory (default: both).
struct ProbeSlowdown {
  int core = 0, probe = 0;
  double factor = 1;
  bool compute = true, memory = true, handoff = false;  // a rate named: only that one
};
// Parses the variable's value; Error naming it when malformed.
ProbeSlowdown parse_probe_slowdown(const std::string& text);

struct PointSpec;

// sweep --tuned: one tune report (read_tune_report), which puts each of its strategies' winner
// beside that strategy's default point of the same model, cores and nodes (tuned_points.cpp).
struct TunedSettings {
  std::filesystem::path file;
  nlohmann::json report;
};

struct SweepOptions {
  std::vector<ModelKind> models = {ModelKind::fc3, ModelKind::lenet5};
  // Empty: every strategy the registry lists. The PyTorch peers (pytorch, pytorch-ddp) run only
  // when named.
  std::vector<std::string> strategies;
  std::vector<int> cores;               // empty: 1..nproc
  std::vector<int> nodes;               // empty: 1..min(4, nproc)
  int repeat = 3;
  int warmup = 1;
  std::int64_t steps = 60;   // per repetition; < 0: use epochs
  // > 0: each point calibrates its steps per repetition so that one takes at least min_time
  // seconds, from a probe of a few steps up (measure.cpp), and `steps` is not used; 0: `steps`.
  double min_time = 0;
  std::int64_t epochs = -1;
  int batch = 64;
  float lr = 0.01f, momentum = 0.9f;
  std::uint64_t seed = 1;
  bool pin = true;
  int shards = 1;  // --shards: every point visits the data in the order of N blocks
  bool oversubscribe = false;  // launched points may run more threads than the machine has
  // Strategy options (OptionSpec::in_sweep) by name, passed on to the points of the strategies
  // they apply to; one not given takes its sweep_default when it has one.
  std::map<std::string, std::string> options;
  std::string isa = "best";  // SIMD target of the kernels (cnnbench::use_isa), passed on to jobs
  // Data: MNIST from data_dir when set, else synthetic_samples synthetic samples.
  std::optional<std::filesystem::path> data_dir;
  std::size_t synthetic_samples = 8192;
  // Time to accuracy: off when target_accuracy is unset.
  std::optional<double> target_accuracy;
  std::int64_t eval_every = 25;       // steps between test-set evaluations
  std::int64_t tta_max_steps = 3000;  // give up ("not reached") after this many steps
  // Cluster points (and the allreduce benchmark) run under launcher: with mpirun
  // `launcher [--bind-to none] ... launcher_args [--hostfile F] -np N self train ...`, with srun
  // `launcher [--mpi=pmix] -n N [--cpus-per-task C] [--overcommit] launcher_args self train ...`
  // inside a Slurm allocation.
  LauncherKind launcher_kind = LauncherKind::mpirun;
  // Emulated hosts (docs/cluster.md): N > 0 brings N network namespaces up for the sweep and
  // launches the cluster points through their mpirun, over TCP, each link capped at link_rate
  // (tc's units, "" for none). `network` is what the report's config records of them.
  int emulated_hosts = 0;
  std::string link_rate;
  nlohmann::json network;
  // An allreduce-bench report measured already over the same launcher and ranks (`cnnbench tune`
  // profiles the link before it plans): the sweep's `allreduce`, not measured again. Null: measure.
  nlohmann::json allreduce;
  std::string launcher = "mpirun";  // the launcher's command: a name looked up in PATH, or a path
  std::vector<std::string> launcher_args;
  std::optional<std::filesystem::path> hostfile;  // mpirun only
  // The Python that runs the PyTorch peers (pytorch, pytorch-ddp): /usr/bin/python3, where Debian
  // installs python3-torch, when it exists, else python3 in PATH.
  std::string python = "python3";
  std::filesystem::path self;          // this cnnbench binary
  std::filesystem::path out;           // the report, rewritten after every preparation and round
  bool resume = false;                 // keep the finished points of an existing `out`
  // --force: replace an existing `out` and traces. Without it or `resume`, an existing trace of
  // the plan is refused before the first point (with `resume`, the traces are the sweep's own).
  bool force = false;
  // --trace-dir: while it is prepared each point runs one more repetition, traced, and writes its
  // Chrome trace to trace_dir / trace_file_name(point); the timed repetitions are untraced.
  std::optional<std::filesystem::path> trace_dir;
  bool quiet = false;
  std::optional<ProbeSlowdown> probe_slowdown;  // tests only
  std::function<bool()> stop_requested;  // Ctrl-C: finish nothing more, mark incomplete
  // A now_seconds() time (0: none; `cnnbench tune --budget`): no round starts that would end after
  // it, judged by the last round's length, and no slow repetition is retried past it. The first
  // round always runs, so every point has a repetition; the points of a sweep its deadline cut
  // carry rounds_done, and the sweep is not complete.
  double deadline_s = 0;
  // Not empty: exactly these points, in this order, instead of the grid of models x strategies x
  // cores x nodes (their serial baselines among them; `cnnbench tune`).
  std::vector<PointSpec> plan;
  // sweep --tuned: the winners of these tunes measured beside their defaults (the grid's points).
  std::vector<TunedSettings> tuned;
};

// Runs the sweep and returns its report (also written to options.out after every point's
// preparation and every round).
SweepRecord run_sweep(const SweepOptions& options);

// The points a sweep would measure, in order (serial baselines first), before any skipping.
struct PointSpec {
  PointSpec() = default;
  PointSpec(ModelKind model_, std::string strategy_, int cores_, int nodes_)
      : model(model_), strategy(std::move(strategy_)), cores(cores_), nodes(nodes_) {}
  ModelKind model = ModelKind::fc3;
  std::string strategy;
  int cores = 1;  // threads per node (stream: pinned cores; blas: OpenBLAS threads)
  int nodes = 1;  // MPI ranks (cluster only)
  // A setting of the point's own, over the sweep's strategy options (`cnnbench tune` measures
  // several settings of one strategy at one core count), named by `variant` in the id.
  std::map<std::string, std::string> options;
  std::string variant;
  // sweep --tuned: what the point's record says of the tune behind it (PointRecord::tuned).
  nlohmann::json tuned;
  int total_cores() const { return cores * nodes; }
  std::string id() const;  // "fc3/stream/n1c2", with a variant "fc3/stream/n1c2/t3"
};
// The name of a point's trace in sweep --trace-dir: "fc3-stream-n1c2.json".
std::string trace_file_name(const PointSpec& point);
std::vector<PointSpec> plan_points(const SweepOptions& options, const std::vector<int>& cores,
                                   const std::vector<int>& nodes, int machine_cores);
// sweep --tuned: each tune's winner per strategy, as a point of variant "tuned" right after the
// plan's point of the tune's default (same model, strategy, cores and nodes), or, where the winner
// is the default, that point marked. A tune the plan cannot take (another batch, its default
// point not in the plan, emulated hosts other than the sweep's) is an Error naming its file.
void add_tuned_points(std::vector<PointSpec>& plan, const SweepOptions& options);

// Bytes one point needs at most (every rank: data set, parameters + gradients + momentum per
// worker, activations of the batch), for refusing points that cannot fit in memory.
std::uint64_t estimate_point_bytes(const PointSpec& point, int batch, std::size_t train_samples,
                                   std::size_t test_samples);
// available_memory_bytes() is core's (cnnbench/core.hpp).

// Time to accuracy of one in-process configuration, MLPerf-style: the clock starts before the
// data is loaded; every eval_every steps the test set is evaluated (inside the clock) until
// accuracy >= target. Every MPI rank runs it (each evaluates, so all stop at the same step);
// returns {"target", "reached", "seconds", "steps", "eval_every", "curve": [{step, seconds,
// accuracy}]} with "seconds"/"steps" null when not reached.
struct TimeToAccuracyJob {
  nlohmann::json config;  // a TrainConfig (to_json) plus "data_dir" or "synthetic"
  double target = 0.9;
  std::int64_t eval_every = 25;
  std::int64_t max_steps = 3000;
};
nlohmann::json measure_time_to_accuracy(const TimeToAccuracyJob& job, bool* primary = nullptr);
// The test set of time to accuracy: MNIST's test split when data_dir is set, else synthetic samples
// after the training set's synthetic_samples (never one of them).
struct Dataset;
Dataset accuracy_test_set(const std::optional<std::filesystem::path>& data_dir,
                          std::size_t synthetic_samples, std::uint64_t seed);
// The job as the sweep hands it to a launched `cnnbench sweep --tta-job FILE`.
void to_json(nlohmann::json& out, const TimeToAccuracyJob& job);
void from_json(const nlohmann::json& in, TimeToAccuracyJob& job);

}  // namespace cnnbench
