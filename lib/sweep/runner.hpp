// The sweep runner: serial baselines first, then every point of models x strategies x cores x
// nodes, each repeated, in-process through run_training, (cluster) under the MPI launcher
// (mpirun or srun) or (the PyTorch peers) as bench/torch_peer.py; the report is rewritten
// atomically after every finished point so an interrupted sweep keeps them.
// runner.cpp holds the sweep as a whole (plan, resume, ETA, the report); measure.cpp one point.
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
#include "launcher.hpp"
#include "peer.hpp"

namespace cnnbench {

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
  double point_cost(const PointSpec& p) const;
  void announce(std::size_t index, std::size_t total, const PointSpec& point, double eta) const;
  void finish_point();
  void print_table() const;
  void warn_noisy_points() const;
  void save() const;

  // measure.cpp
  PointRecord point_header(const PointSpec& point) const;
  PointRecord not_measured(const PointSpec& point, const std::string& status,
                           const std::string& reason) const;
  PointRecord measure(const PointSpec& point);
  std::optional<PairedBaseline> paired_baseline_of(const PointSpec& point) const;
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
  nlohmann::json launch_for_json(const std::vector<std::string>& args,
                                 const std::filesystem::path& output, const std::string& what) const;
  void measure_allreduce();
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
};

}  // namespace cnnbench
