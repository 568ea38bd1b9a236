// The stream executor's trace: a track per core, the same whole steps on each; a flow from each
// firing to the firings that popped its tokens; each channel's queue depth as a counter.
#include <algorithm>
#include <map>

#include "cnnbench/stream.hpp"

namespace cnnbench::stream {

namespace {

struct FiringAt {
  int core = 0;
  const Span* span = nullptr;
};
using FiringKey = std::pair<int, std::int64_t>;  // (actor, firing)

ClockTicks middle(const Span& span) { return span.start + (span.end - span.start) / 2; }

std::map<FiringKey, FiringAt> firings_of(const std::vector<TraceTrack>& tracks, int actors) {
  std::map<FiringKey, FiringAt> out;
  for (const TraceTrack& track : tracks) {
    for (const Span& span : track.spans) {
      if (span.label >= 0 && span.label < actors) {
        out[{span.label, span.firing}] = {track.thread, &span};
      }
    }
  }
  return out;
}

// Consumer firing j pops tokens [j r_in, (j + 1) r_in) of the edge; the edge's first
// initial_tokens tokens were there from the start, token t after them came from producer firing
// (t - initial) / r_out.
void add_flows(const Graph& graph, const std::map<FiringKey, FiringAt>& firings, Trace& trace) {
  std::int64_t next_id = 1;
  for (const Edge& edge : graph.edges) {
    const std::int64_t r_out = graph.actors[edge.from]->outputs()[edge.from_port].rate;
    const std::int64_t r_in = graph.actors[edge.to]->inputs()[edge.to_port].rate;
    auto consumer = firings.lower_bound({edge.to, 0});
    for (; consumer != firings.end() && consumer->first.first == edge.to; ++consumer) {
      const std::int64_t j = consumer->first.second;
      const std::int64_t first = j * r_in - edge.initial_tokens;
      const std::int64_t last = (j + 1) * r_in - 1 - edge.initial_tokens;
      if (last < 0) continue;
      for (std::int64_t k = std::max<std::int64_t>(0, first) / r_out; k <= last / r_out; ++k) {
        const auto producer = firings.find({edge.from, k});
        if (producer == firings.end()) continue;
        const FiringAt& from = producer->second;
        const FiringAt& to = consumer->second;
        trace.flows.push_back({next_id++, 0, from.core, middle(*from.span), 0, to.core,
                               middle(*to.span), to.span->step});
      }
    }
  }
}

// The depth after each push (a producer firing's end) and pop (a consumer's) of every channel,
// from the firings' numbers: pushed = initial + (k + 1) r_out, popped = (j + 1) r_in.
void add_queue_depths(const Graph& graph, const std::map<FiringKey, FiringAt>& firings,
                      Trace& trace) {
  struct Change {
    ClockTicks at;
    bool push;
    std::int64_t firing, step;
  };
  std::vector<Change> changes;
  for (std::size_t e = 0; e < graph.edges.size(); ++e) {
    const Edge& edge = graph.edges[e];
    const std::int64_t r_out = graph.actors[edge.from]->outputs()[edge.from_port].rate;
    const std::int64_t r_in = graph.actors[edge.to]->inputs()[edge.to_port].rate;
    changes.clear();
    for (const auto& [key, at] : firings) {
      const auto [actor, firing] = key;
      if (actor == edge.from) changes.push_back({at.span->end, true, firing, at.span->step});
      if (actor == edge.to) changes.push_back({at.span->end, false, firing, at.span->step});
    }
    if (changes.empty()) continue;
    std::sort(changes.begin(), changes.end(),
              [](const Change& a, const Change& b) { return a.at < b.at; });
    // Before the first change on each side, the count its first firing started from.
    std::int64_t pushed = -1, popped = -1;
    for (const Change& change : changes) {
      if (change.push && pushed < 0) pushed = edge.initial_tokens + change.firing * r_out;
      if (!change.push && popped < 0) popped = change.firing * r_in;
    }
    if (pushed < 0 || popped < 0) continue;
    const auto series = static_cast<std::int32_t>(trace.counter_names.size());
    trace.counter_names.push_back("queue " + graph.edge_name(edge));
    for (const Change& change : changes) {
      if (change.push) pushed = edge.initial_tokens + (change.firing + 1) * r_out;
      if (!change.push) popped = (change.firing + 1) * r_in;
      trace.counters.push_back({0, series, change.at, double(pushed - popped), change.step});
    }
  }
}

}  // namespace

Trace Executor::trace(std::int64_t steps) const {
  Trace out;
  for (std::size_t core = 0; core < core_spans_.size(); ++core) {
    const PinRecord& pin = pins_[core];
    const std::string where =
        pin.pu >= 0 ? " pinned to cpu " + std::to_string(pin.pu) : " unpinned";
    out.tracks.push_back({0, static_cast<int>(core), core_spans_[core]->spans(),
                          pin.worker + where, core_spans_[core]->first_whole_step()});
  }
  keep_last_whole_steps(out.tracks, steps);
  for (const auto& actor : graph_.actors) out.labels.push_back(actor->name());
  for (const auto& actor : graph_.actors) out.labels.push_back(actor->name() + " update");
  const auto firings = firings_of(out.tracks, static_cast<int>(graph_.actors.size()));
  add_flows(graph_, firings, out);
  add_queue_depths(graph_, firings, out);
  return out;
}

}  // namespace cnnbench::stream
