// What `train --trace` writes, before it is JSON: every thread's spans of the last steps (the
// same whole steps on every track), the names spans point at, flows from a span to the span that
// consumed its output, and counters sampled over time (docs/design.md, "Where the time goes").
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "cnnbench/step_timeline.hpp"

namespace cnnbench {

// A SpanRing's first size in spans per step: a LeNet-5 step records 13 (serial) to about 40
// (a rank's thread with overlap's calls); the ring grows at a step's end when a step holds more.
constexpr std::size_t spans_per_step_guess = 64;

// An arrow from one span to another ("s" and "f" events of one id): a stream actor's firing to
// the firing that consumed its output.
struct TraceFlow {
  std::int64_t id = 0;
  int from_process = 0, from_thread = 0;
  ClockTicks from = 0;  // inside the producing span
  int to_process = 0, to_thread = 0;
  ClockTicks to = 0;  // inside the consuming span
  std::int64_t step = 0;
};

// One sample of a counter track (a channel's queue depth) from `at` on.
struct TraceCounter {
  int process = 0;
  std::int32_t series = 0;  // index into Trace::counter_names
  ClockTicks at = 0;
  double value = 0;
  std::int64_t step = 0;
};

struct Trace {
  std::vector<TraceTrack> tracks;
  std::vector<std::string> labels;         // what Span::label names
  std::vector<std::string> counter_names;  // what TraceCounter::series names
  std::vector<TraceFlow> flows;
  std::vector<TraceCounter> counters;
};

// The steps every track holds whole: from the latest first_whole_step to the earliest last step.
struct StepWindow {
  std::int64_t first = 0, last = -1;
  bool contains(std::int64_t step) const { return step >= first && step <= last; }
};
StepWindow common_whole_steps(std::span<const TraceTrack> tracks);
// Drops every span outside the last `steps` steps that all tracks hold whole, so that each track
// shows the same steps, each of them complete. Returns those steps.
StepWindow keep_last_whole_steps(std::vector<TraceTrack>& tracks, std::int64_t steps);

// ---- clock alignment of ranks on several machines -----------------------------------------

// One ping-pong with the reference rank: our clock when we sent, the reference's clock when it
// answered, our clock when the answer came back.
struct PingPong {
  ClockTicks sent = 0, reference = 0, received = 0;
};
// What to add to our clock to read the reference's: the ping-pong with the shortest round trip,
// its reference time against the midpoint of ours (error at most half that round trip).
ClockTicks clock_offset(std::span<const PingPong> samples);
// `rounds` ping-pongs through `ping` (sends, returns the reference's clock at its answer),
// timed by `clock`; then clock_offset.
ClockTicks estimate_clock_offset(int rounds, const std::function<ClockTicks()>& clock,
                                 const std::function<ClockTicks()>& ping);
// Moves every span of `tracks` by `offset` ticks (onto the reference's clock).
void shift_spans(std::vector<TraceTrack>& tracks, ClockTicks offset);

}  // namespace cnnbench
