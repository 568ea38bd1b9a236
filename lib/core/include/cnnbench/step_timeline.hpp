// Where a step's time goes: each worker thread marks the boundaries between the phases of its
// steps (each layer's compute, the update, the reduction, the waits) into storage it owns, and
// the breakdown (time_breakdown.hpp) adds the workers' steps up along the critical path.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cnnbench {

// What a worker's time was spent on (docs/design.md, "Where the time goes").
enum class TimeCategory : std::uint8_t {
  compute,                // forward + backward
  update,                 // SGD, replica and parameter-block updates
  reduce,                 // intra-node gradient sums
  communication_exposed,  // waiting on communication between ranks
  imbalance_wait,         // waiting at a barrier for a slower worker
  fill_drain,             // a pipeline core idle while the pipeline fills or drains
  starvation,             // a pipeline core idle for lack of tokens in the steady state
  data,                   // gathering batches, copying inputs
  other,                  // what no phase claimed
};
constexpr std::size_t time_category_count = 9;
// "compute_s", "update_s", ... as the report names them.
const char* time_category_key(TimeCategory category);

// The most layers a model names in the breakdown (LeNet-5: c1 c2 f1 f2 f3 and the loss).
constexpr std::size_t max_timed_layers = 8;

// Compute that belongs to no layer; with the layers' times it adds up to compute_s.
enum class ComputePart : std::uint8_t {
  splitjoin,        // the stream graph's split and join actors: dealing and merging tokens
  clear_gradients,  // zeroing a gradient buffer before backward accumulates into it
  injected,         // --slowdown: the time a core that much slower would have taken on top
};
constexpr std::size_t compute_part_count = 3;
// "splitjoin_s", "clear_gradients_s", "injected_s" as the report names them.
const char* compute_part_key(ComputePart part);

// The calling thread's CPU time and involuntary context switches so far. The CPU time is
// clock_gettime(CLOCK_THREAD_CPUTIME_ID), exact to the nanosecond; getrusage(RUSAGE_THREAD)'s
// own CPU time lags by up to a scheduler tick on a running thread (a 500 us busy loop read as
// 1 us or 2.6 ms), so it gives only the switches. Both: ~0.55 us on the 2-core EPYC VM.
struct ThreadCpu {
  double seconds = 0;
  std::int64_t involuntary_switches = 0;
};
ThreadCpu thread_cpu();

// Seconds the calling thread has spent runnable but waiting for a core (the run queue of
// /proc/thread-self/schedstat, exact to the nanosecond): the OS's share of its wall time, whether
// it was working or about to. 0 where the kernel does not keep it.
double thread_run_queue_seconds();

// Steady-clock nanoseconds: a read costs ~20 ns and never allocates.
using ClockTicks = std::int64_t;
inline ClockTicks clock_ticks() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One worker's seconds in one step (or, added up, in many).
struct StepTimes {
  std::array<double, time_category_count> seconds{};
  std::array<double, max_timed_layers> layer_seconds{};  // also counted in compute
  std::array<double, compute_part_count> part_seconds{};  // also counted in compute
  double wall = 0;
  // Of the time the worker spent working (not waiting), what it spent off its core although it
  // was runnable: wall minus CPU time of its working regions; and the OS's preemptions there.
  double descheduled = 0;
  double involuntary_switches = 0;
  // Seconds from the step's start until the worker reached the step's collective (the sum over
  // the ranks); the breakdown compares ranks' arrivals to tell imbalance from communication.
  double arrival = 0;

  double& operator[](TimeCategory category) { return seconds[static_cast<std::size_t>(category)]; }
  double operator[](TimeCategory category) const {
    return seconds[static_cast<std::size_t>(category)];
  }
  // Seconds the worker worked, not waited: wall minus the waits and the pipeline's idle time.
  double busy() const;
  StepTimes& operator+=(const StepTimes& other);
};

// One phase of one step as a trace shows it: where it lay on the clock, what it was and which
// step it belongs to. Strategies fill the fields that mean something to them (an actor's firing,
// a communication call's bytes); -1 is "none". Another strategy adds its spans the same way:
// a thread's spans go to its own SpanRing (one writer), stamped with the step; names beyond a
// layer or a category go in Trace::labels (trace.hpp) and the span points at them with `label`.
struct Span {
  ClockTicks start = 0, end = 0;
  std::int64_t step = -1;         // the step's global index (args.step)
  std::int64_t firing = -1;       // stream: the actor's firings before this one (flow events)
  std::int64_t bytes = -1;        // a communication call's payload
  std::int32_t label = -1;        // index into Trace::labels (an actor, an MPI call); -1: none
  std::int16_t peers = -1;        // a communication call's ranks
  std::int16_t micro_batch = -1;  // stream: the micro-batch of its step
  std::int16_t copy = -1;         // stream: the copy of the net
  TimeCategory category = TimeCategory::other;
  std::int8_t layer = -1;  // the layer of a compute span, else -1
};

// One thread's spans as a trace shows them: process = rank, thread = the thread in the rank.
// Steps from first_whole_step on have all their spans here (the ring overwrote older ones).
struct TraceTrack {
  int process = 0, thread = 0;
  std::vector<Span> spans;
  std::string name;  // the thread's name in the trace ("core 1"); empty: "thread N"
  std::int64_t first_whole_step = 0;
};

// The spans of one thread's last steps, oldest overwritten first. Sized up front for `steps`
// steps; end_step grows it while a step holds more spans than that allows (the first steps of a
// run), so recording a span never allocates.
class SpanRing {
 public:
  SpanRing(std::size_t steps, std::size_t spans_per_step)
      : steps_(steps), spans_(std::max<std::size_t>(1, steps * spans_per_step)) {}
  void push(const Span& span) {
    Span& slot = spans_[next_ % spans_.size()];
    if (next_ >= spans_.size()) overwritten_through_ = std::max(overwritten_through_, slot.step);
    slot = span;
    ++next_;
    ++in_step_;
  }
  // The span pushed last, nullptr before the first.
  Span* last() { return next_ == 0 ? nullptr : &spans_[(next_ - 1) % spans_.size()]; }
  // A step ended: keep room for the kept steps and one being recorded, all of its size.
  void end_step();
  // The recorded spans, oldest first.
  std::vector<Span> spans() const;
  // The first step none of whose spans were overwritten.
  std::int64_t first_whole_step() const { return overwritten_through_ + 1; }

 private:
  std::size_t steps_;
  std::vector<Span> spans_;
  std::size_t next_ = 0;
  std::size_t in_step_ = 0;  // spans pushed since the last end_step
  std::int64_t overwritten_through_ = -1;
};

// One worker's phases, step by step. Every call closes the phase that began at the previous
// boundary (the cursor), so a step's categories add up to its wall time by construction and
// what no phase claimed lands in `other`. Storage for a range of steps is reserved up front
// (reserve_steps); a boundary is a clock read and a few additions. One thread writes a
// timeline at a time; a worker pool's barrier orders the handover to the thread that reads it.
class StepTimeline {
 public:
  // Room for this many steps before steps() is read and cleared: no allocation per step.
  void reserve_steps(std::size_t steps) { steps_.reserve(steps); }

  void begin_step(ClockTicks now = clock_ticks());
  // [cursor, now) was `category`; the cursor moves to now.
  void close(TimeCategory category, ClockTicks now = clock_ticks()) {
    add(category, -1, now);
  }
  // [cursor, now) was the compute of layer `layer` (an index into the model's timed layers).
  void close_layer(int layer, ClockTicks now = clock_ticks()) {
    add(TimeCategory::compute, layer, now);
  }
  // [cursor, now) was compute outside the layers, `part` of it.
  void close_part(ComputePart part, ClockTicks now = clock_ticks()) {
    current_.part_seconds[static_cast<std::size_t>(part)] += seconds(cursor_, now);
    add(TimeCategory::compute, -1, now);
    last_part_ = static_cast<int>(part);
  }
  // The calling thread works on this step from now until end_work(): a region that never
  // blocks (compute, update), so whatever of it the thread's CPU time lacks, the OS ran
  // something else. Waits stay outside: a blocked wait uses no CPU and is no descheduling.
  void begin_work() {
    work_start_ = clock_ticks();
    work_cpu_ = thread_cpu();
  }
  void end_work();
  // This step reached its collective now (see StepTimes::arrival).
  void mark_arrival(ClockTicks now = clock_ticks()) { current_.arrival = seconds(step_start_, now); }
  // [cursor, now) was `other`; the step is stored.
  void end_step(ClockTicks now = clock_ticks());
  ClockTicks cursor() const { return cursor_; }

  // The steps ended since the last clear, in order.
  const std::vector<StepTimes>& steps() const { return steps_; }
  void clear_steps() { steps_.clear(); }

  // Spans also go to `ring` (a trace); nullptr, the default, records none.
  void record_spans(SpanRing* ring) { spans_ = ring; }
  // The global index of the next step begun (Span::step); then counted on by begin_step.
  void number_steps_from(std::int64_t step) { next_step_ = step; }

 private:
  static double seconds(ClockTicks from, ClockTicks to) { return 1e-9 * double(to - from); }
  void add(TimeCategory category, int layer, ClockTicks now) {
    last_category_ = category;
    last_layer_ = layer;
    last_part_ = -1;
    const double s = seconds(cursor_, now);
    current_.seconds[static_cast<std::size_t>(category)] += s;
    if (layer >= 0) current_.layer_seconds[static_cast<std::size_t>(layer)] += s;
    if (spans_ != nullptr) push_span(category, layer, now);
    cursor_ = now;
  }

  // A trace leaves out gaps under a microsecond that no phase claimed: half the spans otherwise.
  void push_span(TimeCategory category, int layer, ClockTicks now) {
    if (category == TimeCategory::other && now - cursor_ < 1000) return;
    Span span;
    span.start = cursor_;
    span.end = now;
    span.step = step_;
    span.category = category;
    span.layer = static_cast<std::int8_t>(layer);
    spans_->push(span);
  }

  StepTimes current_;
  ClockTicks step_start_ = 0, cursor_ = 0;
  ClockTicks work_start_ = 0;
  ThreadCpu work_cpu_;
  // The phase closed last, which end_work extends over its own reads.
  TimeCategory last_category_ = TimeCategory::other;
  int last_layer_ = -1, last_part_ = -1;
  std::int64_t step_ = 0, next_step_ = 0;
  std::vector<StepTimes> steps_;
  SpanRing* spans_ = nullptr;
};

}  // namespace cnnbench
