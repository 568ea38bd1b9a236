// A run's time breakdown: the workers' step times (step_timeline.hpp) added up along the
// critical path, the slowest worker of each step, with every worker's own sums beside it and
// the straggler that made the others wait.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cnnbench/step_timeline.hpp"

namespace cnnbench {

// A worker as the report names it: a thread, a rank, a copy of the net or a pipeline core
// ("stage"); `rank` is the rank of a thread of a multi-rank job, else -1.
struct WorkerId {
  std::string kind;
  int id = 0;
  int rank = -1;
};

struct WorkerBreakdown {
  WorkerId worker;
  StepTimes total;
};

// The worker (of `kind`) whose busy time made the others wait, and by how much: its mean busy
// time over the steps / the median of the other workers' means. 1 with a single worker.
struct Straggler {
  std::string kind;
  int id = 0;
  double mean_excess = 1.0;
  // How much of the straggler's excess busy time over the median of the others its excess
  // descheduled time explains, 0..1: near 1 the OS ran something else on its core.
  double descheduled_share = 0;
};

// (descheduled - median of the others' descheduled) / (busy - median of the others' busy) of
// `unit`, within 0..1; 0 when it has no excess.
double descheduled_share_of_excess(std::span<const double> busy,
                                   std::span<const double> descheduled, std::size_t unit,
                                   std::vector<double>& scratch);

struct TimeBreakdown {
  std::int64_t steps = 0;
  StepTimes critical_path;               // summed over the steps
  std::vector<std::string> layer_names;  // of critical_path.layer_seconds
  std::vector<WorkerBreakdown> workers;
  Straggler straggler;
  std::vector<int> balanced_shares;  // dynamic balance's last shares, when it runs
  // Of critical_path's other: the part the OS kept the calling thread off its core (also in
  // critical_path.descheduled).
  double other_descheduled = 0;
  bool measured() const { return steps > 0; }
};

// Busy time of `busy[unit]` over the median of the others' (1 when there are no others or
// they did not work); `scratch` holds the others while they are sorted.
double excess_over_median_of_others(std::span<const double> busy, std::size_t unit,
                                    std::vector<double>& scratch);

// Builds a breakdown step by step. Workers are grouped into units (the ranks of a job, or each
// worker its own): a unit's busy time in a step is its busiest worker's, and the straggler is a
// unit.
class BreakdownBuilder {
 public:
  BreakdownBuilder() = default;
  // unit_of[w]: the unit of worker w, 0..units-1.
  BreakdownBuilder(std::vector<WorkerId> workers, std::string unit_kind, std::vector<int> unit_of);

  // One step: step[w] is worker w's times, `wall` the step's wall time on this process's clock.
  // The critical path takes the busiest worker's work as it was measured and, where that
  // worker's step was cut at other instants (another rank leaves a collective a little later),
  // scales its waits to what `wall` leaves of it: the path adds up to this process's steps.
  void add_step(std::span<const StepTimes> step, double wall) { add_steps(step, 1, wall); }
  // `steps` steps summed, where the workers' steps cannot be told apart (a pipeline's overlap):
  // its critical path is the busiest worker over all of them.
  void add_steps(std::span<const StepTimes> summed, std::int64_t steps, double wall);
  // The steps added since the last call ran inside `seconds` of this process's wall time (the
  // strategy's whole call): the part no step holds (the driver's callbacks between steps, the
  // gathering at the end of the range) is the critical path's other_s. `descheduled_outside_steps`
  // is the calling thread's run-queue time outside the steps (thread_run_queue_seconds): as much
  // of other_s as that explains counts as descheduled too (other_descheduled).
  void end_range(double seconds, double descheduled_outside_steps = 0);
  std::size_t workers() const { return workers_.size(); }
  TimeBreakdown result(std::vector<std::string> layer_names) const;

 private:
  std::vector<WorkerBreakdown> workers_;
  std::string unit_kind_;
  std::vector<int> unit_of_;
  int units_ = 1;
  std::int64_t steps_ = 0;
  StepTimes critical_;
  double range_wall_ = 0;  // of the steps added since the last end_range
  double other_descheduled_ = 0;
  // Per unit, over the steps: its busiest worker's busy and descheduled time.
  std::vector<double> unit_busy_sum_, unit_descheduled_sum_;
  std::vector<std::size_t> unit_busiest_;  // scratch of add_steps
};

// Moves each rank's wait for the last rank to arrive at a step's collective from
// communication_exposed to imbalance_wait: by[rank][worker] are one step's times. The ranks
// leave the previous collective together, so a rank that arrived d seconds before the last one
// waited d seconds for it, not for the network (at most what it waited in all).
void separate_rank_imbalance(std::span<std::vector<StepTimes>> by_rank);

}  // namespace cnnbench
