// What a cluster rank records of its steps' times: every share's timeline (ThreadState), closed
// at the step's common boundaries, gathered into the breakdown where the ranks meet with each
// rank's imbalance told from its communication, and for --trace the last steps' spans with the
// same waits relabelled.
#pragma once

#include <cstdint>
#include <vector>

#include "cnnbench/step_timeline.hpp"
#include "cnnbench/time_breakdown.hpp"
#include "cnnbench/trace.hpp"
#include "node_step.hpp"
#include "../rank_group.hpp"

namespace cnnbench {

class ClusterStepTimes {
 public:
  // `threads` are this rank's shares; both outlive this record.
  ClusterStepTimes(RankGroup& group, std::vector<ThreadState>& threads);

  // A breakdown of ranks x threads shares, anew.
  void reset(int ranks, int threads_per_rank);
  // Before steps [global_first, global_first + count) of a range.
  void begin_range(std::int64_t global_first, std::int64_t count);
  void end_range(double seconds, double queued_outside_steps);

  // Every share's timeline at one of the step's common boundaries.
  void close_all(TimeCategory category);
  void arrive_all();
  void end_step_all();

  // Collective: the steps since the ranks last met, every rank's, into the breakdown.
  void gather_into_breakdown();
  TimeBreakdown result(ModelKind model) const { return breakdown_.result(timed_layer_names(model)); }

  // --trace: keeps the last `steps` steps' spans of every share; the rings, for the calls the
  // exchange records.
  std::vector<SpanRing*> keep_trace(std::int64_t steps);
  bool tracing() const { return trace_steps_ > 0; }
  // This rank's tracks: the kept steps, the waits the breakdown called imbalance relabelled, on
  // rank 0's clock (`clock_offset`, the ranks' clock_offset_to_rank0).
  std::vector<TraceTrack> own_tracks(std::int64_t clock_offset) const;

 private:
  // What the breakdown moved from a share's communication to imbalance_wait in `step`.
  void note_imbalance_moves(std::int64_t step, const std::vector<StepTimes>& before,
                            const std::vector<StepTimes>& after);

  struct ImbalanceMove {
    std::int64_t step = -1;
    ClockTicks ticks = 0;
  };
  RankGroup& group_;
  std::vector<ThreadState>& threads_;
  int rank_ = 0, ranks_ = 1;
  BreakdownBuilder breakdown_;
  std::int64_t trace_steps_ = 0;
  std::int64_t first_step_since_gather_ = 0;
  std::vector<std::vector<ImbalanceMove>> imbalance_moves_;  // per share, the last steps'
  std::vector<StepTimes> own_steps_before_;  // a step's, before separate_rank_imbalance
};

}  // namespace cnnbench
