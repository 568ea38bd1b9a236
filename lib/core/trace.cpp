// Keeping the same whole steps on every track, and reading ranks' clocks against rank 0's.
#include "cnnbench/trace.hpp"

#include <algorithm>
#include <limits>

#include "cnnbench/core.hpp"

namespace cnnbench {

StepWindow common_whole_steps(std::span<const TraceTrack> tracks) {
  StepWindow window{0, std::numeric_limits<std::int64_t>::max()};
  bool any = false;
  for (const TraceTrack& track : tracks) {
    if (track.spans.empty()) continue;
    std::int64_t last = track.spans.front().step;
    for (const Span& span : track.spans) last = std::max(last, span.step);
    window.first = std::max(window.first, track.first_whole_step);
    window.last = std::min(window.last, last);
    any = true;
  }
  if (!any) window.last = -1;
  return window;
}

StepWindow keep_last_whole_steps(std::vector<TraceTrack>& tracks, std::int64_t steps) {
  StepWindow window = common_whole_steps(tracks);
  window.first = std::max(window.first, window.last - steps + 1);
  for (TraceTrack& track : tracks) {
    std::erase_if(track.spans, [&](const Span& span) { return !window.contains(span.step); });
    track.first_whole_step = window.first;
  }
  return window;
}

ClockTicks clock_offset(std::span<const PingPong> samples) {
  CNNBENCH_CHECK(!samples.empty(), "clock offset: no ping-pong to estimate it from");
  const PingPong* best = &samples.front();
  for (const PingPong& sample : samples) {
    if (sample.received - sample.sent < best->received - best->sent) best = &sample;
  }
  return best->reference - (best->sent + (best->received - best->sent) / 2);
}

ClockTicks estimate_clock_offset(int rounds, const std::function<ClockTicks()>& clock,
                                 const std::function<ClockTicks()>& ping) {
  std::vector<PingPong> samples(static_cast<std::size_t>(std::max(rounds, 1)));
  for (PingPong& sample : samples) {
    sample.sent = clock();
    sample.reference = ping();
    sample.received = clock();
  }
  return clock_offset(samples);
}

void shift_spans(std::vector<TraceTrack>& tracks, ClockTicks offset) {
  for (TraceTrack& track : tracks) {
    for (Span& span : track.spans) {
      span.start += offset;
      span.end += offset;
    }
  }
}

}  // namespace cnnbench
