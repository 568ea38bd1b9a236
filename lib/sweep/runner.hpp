// The sweep runner: serial baselines first, then every point of models x strategies x cores x
// nodes, in-process through run_training, (cluster) under the MPI launcher (mpirun or srun) or
// (the PyTorch peers) as bench/torch_peer.py. Every point is prepared in turn (calibration,
// time to accuracy, trace, warm-up), then rounds visit every point, one repetition each, with
// core probes between them; the report is rewritten atomically after every point's preparation
// and every round so an interrupted sweep keeps what it measured.
// runner.cpp holds the settings, resuming and the printed summary; rounds.cpp the order of the
// work; measure.cpp one run of a point; core_probe.cpp the probes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cnnbench/data.hpp"
#include "cnnbench/records.hpp"
#include "cnnbench/sweep.hpp"
#include "cnnbench/train.hpp"
#include "core_probe.hpp"
#include "launcher.hpp"
#include "peer.hpp"

namespace cnnbench {

// "1h02m", "3m05s", "42s".
std::string duration_text(double seconds);

// Thrown when a stop was requested: the sweep ends with the points it finished.
struct SweepInterrupted {};
// A repetition's loss was not finite: the point is recorded as "diverged", with this reason.
struct PointDiverged {
  std::string reason;
};

// One timed run of a point.
struct Repetition {
  double seconds = 0;
  std::int64_t steps = 0;
  double final_loss = 0;
  nlohmann::json strategy_metrics = nlohmann::json::object();
  nlohmann::json pin_map = nlohmann::json::array();
  // The run report's metrics.time_breakdown and metrics.straggler; null when not measured.
  nlohmann::json time_breakdown, straggler;
  nlohmann::json peer_info;  // a peer's: what ran (PointRecord::peer_info); null for our own
};

// Fills in what `record` keeps of the repetition whose time is the median (median_repetition):
// its index, strategy metrics, pin map, final loss, time breakdown, straggler and noise warning.
// `timed` must not be empty.
void keep_median_repetition(PointRecord& record, std::span<const Repetition> timed);

// The serial point a point's repetitions take turns with, and the core it runs on (-1: unpinned).
struct PairedBaseline {
  PointSpec point;
  int core = -1;
  std::int64_t steps = -1;  // the baseline point's steps per repetition; -1: the sweep's
};

// One repetition of a point as a round (or a retry) takes it: its paired serial repetition, then
// one run on each of its series.
struct TakenRepetition {
  std::optional<Repetition> pair;
  std::vector<Repetition> runs;
};

// One series of a point's repetitions: on one core (the baseline's runs on several), or wherever
// the point's strategy puts its threads (core -1).
struct SeriesRun {
  int core = -1;
  std::vector<double> warmup_times;
  std::vector<Repetition> timed;  // one per round
};

// A point on its way through the sweep: prepared once, then one repetition per round.
struct PointRun {
  PointSpec spec;
  // Kept from --resume, skipped, failed or diverged: the point's record, and no more rounds.
  std::optional<PointRecord> settled;
  PointRecord record;  // the header and what preparation measured
  bool prepared = false;
  std::int64_t steps = -1;  // per repetition; -1: the sweep's
  std::vector<SeriesRun> series;
  // The serial repetitions taken in turn with this point's, decided at their first use.
  std::optional<PairedBaseline> pair;
  std::vector<Repetition> pair_timed;
  std::vector<double> pair_warmup_times;
  std::vector<int> rounds;
  std::vector<double> started_s;
  std::vector<SlowCoreWarningRecord> warnings;
  // The serial point only: the core its pairs run on, fixed at the first pair.
  std::optional<int> pair_core;

  bool taking_rounds() const { return prepared && !settled; }
};

class SweepRunner {
 public:
  explicit SweepRunner(const SweepOptions& options);
  ~SweepRunner();
  SweepRunner(const SweepRunner&) = delete;
  SweepRunner& operator=(const SweepRunner&) = delete;

  SweepRecord run();

 private:
  // runner.cpp
  void load_data();
  void check_trace_outputs(const std::vector<PointSpec>& plan) const;
  std::string sweep_option(const OptionSpec& spec) const;
  nlohmann::json options_json() const;
  nlohmann::json config_json() const;
  std::map<std::string, PointRecord> resumed_points();
  // Work in FLOP-equivalents, for the ETA: a point's preparation and one of its repetitions.
  double repetition_cost(const PointSpec& p) const;
  double preparation_cost(const PointSpec& p) const;
  void print_point(const PointRecord& p) const;
  void print_table() const;
  void warn_noisy_points() const;
  void warn_slow_cores() const;
  void save() const;

  // rounds.cpp
  void run_plan(const std::vector<PointSpec>& plan, const std::map<std::string, PointRecord>& kept);
  void prepare(PointRun& run);
  void take_round(int round);
  // One repetition of the point: its paired serial one, then one on every series (only on
  // `only_series` when given). Throws what run_point throws.
  TakenRepetition take_repetition(PointRun& run, std::optional<std::size_t> only_series);
  void settle(PointRun& run, const std::string& status, const std::string& reason);
  std::optional<PairedBaseline> paired_baseline_of(PointRun& run);
  int decide_pair_core(PointRun& serial) const;
  PointRun* run_of(const std::string& id);
  PointRecord measured_record(const PointRun& run) const;
  void collect_points();  // report_.points from runs_, the probes, the analysis
  void update_report();   // collect_points, then save
  double eta() const;
  // core probes (rounds.cpp)
  void probe_cores(int probe);
  std::vector<int> repetition_cores(const PointRun& run, std::size_t k, const Repetition& rep) const;
  void find_slow_repetitions();
  void retry_slow_repetitions();
  bool cores_normal(std::span<const int> cores);

  // measure.cpp
  PointRecord point_header(const PointSpec& point) const;
  PointRecord not_measured(const PointSpec& point, const std::string& status,
                           const std::string& reason) const;
  std::optional<PointRecord> unrunnable(const PointSpec& point) const;
  std::vector<int> baseline_cores(const PointSpec& point) const;
  void stop_check() const;
  // steps < 0 (the default): SweepOptions::steps.
  TrainConfig train_config(const PointSpec& point, std::int64_t steps = -1) const;
  CalibrationRecord calibrate_steps(const PointSpec& point, int pin_core);
  // One repetition of the point however it runs: in this process, launched, or a peer's worker.
  Repetition run_point(const PointSpec& point, int pin_core, std::int64_t steps);
  // One run of the point in this process (pin_core >= 0: pinned there), keeping the spans of
  // about its last trace_steps steps when > 0.
  RunResult train_in_process(const PointSpec& point, int pin_core, std::int64_t steps,
                             std::int64_t trace_steps = 0) const;
  Repetition run_in_process(const PointSpec& point, int pin_core, std::int64_t steps = -1) const;
  // Runs `args` and reads the JSON it writes to `output`, a file of the scratch folder that is
  // removed first: no earlier run's file is read as this one's, and the job's output rule (an
  // existing file is refused without --force) finds none there.
  nlohmann::json launch_for_json(const std::vector<std::string>& args,
                                 const std::filesystem::path& output, const std::string& what) const;
  void measure_allreduce();
  // After the rounds, allreduce-bench once more where the sweep ran the first itself; the faster
  // of the two stays the sweep's `allreduce` (measure.cpp).
  void measure_allreduce_again();
  std::vector<std::string> launched_train_command(const PointSpec& point, std::int64_t steps) const;
  std::filesystem::path launched_report() const;
  Repetition run_launched(const PointSpec& point, std::int64_t steps = -1) const;
  nlohmann::json time_to_accuracy(const PointSpec& point);
  // The PyTorch peers (peer.hpp): their files, written when the first peer point runs, and one
  // run of the worker (steps < 0: the sweep's steps).
  PeerFiles& peer_files();
  std::int64_t peer_steps(std::int64_t steps) const;
  Repetition run_peer(const PointSpec& point, std::int64_t steps);
  Repetition peer_repetition(const nlohmann::json& run, const std::vector<std::string>& args) const;
  nlohmann::json peer_time_to_accuracy(const PointSpec& point);
  std::filesystem::path trace_point(const PointSpec& point, int pin_core, std::int64_t steps) const;

  const SweepOptions& options_;
  int machine_cores_ = 1;
  Launcher launcher_;
  std::vector<int> cores_, nodes_;
  std::map<std::string, StrategyInfo> available_;
  std::filesystem::path scratch_;
  Dataset train_;
  std::unique_ptr<PeerFiles> peer_files_;
  SweepRecord report_;
  // The sweep in progress: every point of the plan, in order, and the probes between rounds.
  std::vector<PointRun> runs_;
  int rounds_done_ = 0;
  double start_s_ = 0;
  bool rounds_cut_ = false;  // options_.deadline_s ended the rounds before the last
  bool allreduce_measured_here_ = false;  // measure_allreduce ran the bench (not given, not resumed)
  double allreduce_bench_s_ = 0;          // how long it took
  double cost_total_ = 0, cost_done_ = 0, seconds_done_ = 0;
  std::unique_ptr<CoreProbe> core_probe_;
  CoreProbesRecord probes_;
};

}  // namespace cnnbench
