// A cluster rank's record of its steps' times (cluster_step_times.hpp).
#include "cluster_step_times.hpp"

#include <algorithm>

#include "cluster_metrics.hpp"

namespace cnnbench {

namespace {

// The first `moved` ticks of a step's waits on communication (the latest wait first) become
// imbalance_wait, as separate_rank_imbalance moves them in the report; a call's span inside a
// wait is cut where its wait is, so that spans still nest.
void split_imbalance(std::vector<Span>& spans, std::int64_t step, ClockTicks moved) {
  const auto waiting = [&](const Span& span) {
    return span.step == step && span.category == TimeCategory::communication_exposed;
  };
  std::vector<Span> waits;
  for (const Span& span : spans) {
    if (waiting(span) && span.label < 0) waits.push_back(span);
  }
  std::vector<Span> rests;
  for (auto wait = waits.rbegin(); wait != waits.rend() && moved > 0; ++wait) {
    const ClockTicks cut = wait->start + std::min(moved, wait->end - wait->start);
    moved -= cut - wait->start;
    for (Span& span : spans) {
      const bool inside = span.start >= wait->start && span.end <= wait->end;
      if (!inside || !waiting(span) || span.start >= cut) continue;
      if (span.end > cut) {
        Span rest = span;
        rest.start = cut;
        rests.push_back(rest);
        span.end = cut;
      }
      span.category = TimeCategory::imbalance_wait;
    }
  }
  spans.insert(spans.end(), rests.begin(), rests.end());
}

}  // namespace

ClusterStepTimes::ClusterStepTimes(RankGroup& group, std::vector<ThreadState>& threads)
    : group_(group), threads_(threads), rank_(group.rank()), ranks_(group.size()) {}

void ClusterStepTimes::reset(int ranks, int threads_per_rank) {
  breakdown_ = cluster_breakdown_builder(ranks, threads_per_rank);
}

void ClusterStepTimes::begin_range(std::int64_t global_first, std::int64_t count) {
  for (ThreadState& state : threads_) {
    state.timeline.reserve_steps(static_cast<std::size_t>(count));
    state.timeline.number_steps_from(global_first);
  }
  first_step_since_gather_ = global_first;
}

void ClusterStepTimes::end_range(double seconds, double queued_outside_steps) {
  breakdown_.end_range(seconds, queued_outside_steps);
}

void ClusterStepTimes::close_all(TimeCategory category) {
  const ClockTicks now = clock_ticks();
  for (ThreadState& state : threads_) state.timeline.close(category, now);
}

void ClusterStepTimes::arrive_all() {
  const ClockTicks now = clock_ticks();
  for (ThreadState& state : threads_) state.timeline.mark_arrival(now);
}

void ClusterStepTimes::end_step_all() {
  const ClockTicks now = clock_ticks();
  for (ThreadState& state : threads_) state.timeline.end_step(now);
}

void ClusterStepTimes::gather_into_breakdown() {
  std::vector<const StepTimeline*> timelines;
  for (const ThreadState& state : threads_) timelines.push_back(&state.timeline);
  auto steps = gather_step_times(group_, timelines);
  std::vector<StepTimes> flat;
  for (std::size_t k = 0; k < steps.size(); ++k) {
    auto& by_rank = steps[k];
    if (ranks_ > 1) {
      own_steps_before_ = by_rank[static_cast<std::size_t>(rank_)];  // reuses its capacity
      separate_rank_imbalance(by_rank);
      note_imbalance_moves(first_step_since_gather_ + static_cast<std::int64_t>(k),
                           own_steps_before_, by_rank[static_cast<std::size_t>(rank_)]);
    }
    flat.clear();
    for (const auto& rank : by_rank) flat.insert(flat.end(), rank.begin(), rank.end());
    // This rank's threads share the step's boundaries: its wall on this rank's clock.
    breakdown_.add_step(flat, by_rank[static_cast<std::size_t>(rank_)][0].wall);
  }
  for (ThreadState& state : threads_) state.timeline.clear_steps();
}

// Kept for the last trace_steps_ + 1 steps, each step in its slot of a ring.
void ClusterStepTimes::note_imbalance_moves(std::int64_t step, const std::vector<StepTimes>& before,
                                            const std::vector<StepTimes>& after) {
  for (std::size_t t = 0; t < imbalance_moves_.size(); ++t) {
    std::vector<ImbalanceMove>& moves = imbalance_moves_[t];
    const double moved =
        after[t][TimeCategory::imbalance_wait] - before[t][TimeCategory::imbalance_wait];
    moves[static_cast<std::size_t>(step) % moves.size()] = {step, ClockTicks(1e9 * moved)};
  }
}

std::vector<SpanRing*> ClusterStepTimes::keep_trace(std::int64_t steps) {
  trace_steps_ = steps;
  std::vector<SpanRing*> rings;
  for (ThreadState& state : threads_) {
    state.spans = std::make_unique<SpanRing>(static_cast<std::size_t>(steps), spans_per_step_guess);
    state.timeline.record_spans(state.spans.get());
    rings.push_back(state.spans.get());
  }
  imbalance_moves_.assign(threads_.size(),
                          std::vector<ImbalanceMove>(static_cast<std::size_t>(steps) + 1));
  return rings;
}

std::vector<TraceTrack> ClusterStepTimes::own_tracks(std::int64_t clock_offset) const {
  std::vector<TraceTrack> own;
  for (std::size_t t = 0; t < threads_.size(); ++t) {
    const SpanRing& ring = *threads_[t].spans;
    own.push_back({rank_, static_cast<int>(t), ring.spans(), "", ring.first_whole_step()});
    for (const ImbalanceMove& move : imbalance_moves_[t]) {
      if (move.step >= 0 && move.ticks > 0) split_imbalance(own.back().spans, move.step, move.ticks);
    }
  }
  keep_last_whole_steps(own, trace_steps_);
  shift_spans(own, clock_offset);
  return own;
}

}  // namespace cnnbench
