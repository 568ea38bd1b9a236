// --trace's file: a Trace in the Chrome Trace Event Format (docs/design.md, "Where the time goes").
#include <algorithm>
#include <set>

#include "cnnbench/report.hpp"

namespace cnnbench {

namespace {

// "compute_s" -> "compute": a span without a label or a layer is named by its category.
std::string span_name(const Span& span, const Trace& trace,
                      const std::vector<std::string>& layer_names) {
  if (span.label >= 0 && static_cast<std::size_t>(span.label) < trace.labels.size()) {
    return trace.labels[static_cast<std::size_t>(span.label)];
  }
  if (span.layer >= 0 && static_cast<std::size_t>(span.layer) < layer_names.size()) {
    return layer_names[static_cast<std::size_t>(span.layer)];
  }
  const std::string category = time_category_key(span.category);
  return category.substr(0, category.size() - 2);
}

nlohmann::json span_args(const Span& span) {
  nlohmann::json args = {{"step", span.step}};
  if (span.micro_batch >= 0) args["micro_batch"] = span.micro_batch;
  if (span.copy >= 0) args["copy"] = span.copy;
  if (span.bytes >= 0) args["bytes"] = span.bytes;
  if (span.peers >= 0) args["peers"] = span.peers;
  return args;
}

// Times from the earliest span, so that every timestamp is >= 0.
ClockTicks trace_origin(const Trace& trace) {
  ClockTicks origin = 0;
  bool first = true;
  for (const TraceTrack& track : trace.tracks) {
    for (const Span& span : track.spans) {
      if (first || span.start < origin) origin = span.start;
      first = false;
    }
  }
  return origin;
}

void add_names(const Trace& trace, nlohmann::json& events) {
  std::set<int> processes;
  for (const TraceTrack& track : trace.tracks) {
    if (processes.insert(track.process).second) {
      events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", track.process},
                        {"args", {{"name", "rank " + std::to_string(track.process)}}}});
    }
    const std::string name =
        track.name.empty() ? "thread " + std::to_string(track.thread) : track.name;
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", track.process},
                      {"tid", track.thread}, {"args", {{"name", name}}}});
  }
}

// Microseconds from the earliest span.
struct TraceClock {
  ClockTicks origin;
  double operator()(ClockTicks t) const { return 1e-3 * double(t - origin); }
};

void add_spans(const Trace& trace, const std::vector<std::string>& layer_names, TraceClock us,
               nlohmann::json& events) {
  for (const TraceTrack& track : trace.tracks) {
    for (const Span& span : track.spans) {
      events.push_back({{"ph", "X"}, {"name", span_name(span, trace, layer_names)},
                        {"cat", time_category_key(span.category)}, {"pid", track.process},
                        {"tid", track.thread}, {"ts", us(span.start)},
                        {"dur", 1e-3 * double(span.end - span.start)}, {"args", span_args(span)}});
    }
  }
}

// A flow starts inside the producing span and ends inside ("bp": "e") the consuming one.
void add_flows(const Trace& trace, TraceClock us, nlohmann::json& events) {
  for (const TraceFlow& flow : trace.flows) {
    const nlohmann::json args = {{"step", flow.step}};
    events.push_back({{"ph", "s"}, {"name", "token"}, {"cat", "flow"}, {"id", flow.id},
                      {"pid", flow.from_process}, {"tid", flow.from_thread},
                      {"ts", us(flow.from)}, {"args", args}});
    events.push_back({{"ph", "f"}, {"bp", "e"}, {"name", "token"}, {"cat", "flow"},
                      {"id", flow.id}, {"pid", flow.to_process}, {"tid", flow.to_thread},
                      {"ts", us(flow.to)}, {"args", args}});
  }
}

void add_counters(const Trace& trace, TraceClock us, nlohmann::json& events) {
  for (const TraceCounter& counter : trace.counters) {
    if (counter.at < us.origin || counter.series < 0 ||
        static_cast<std::size_t>(counter.series) >= trace.counter_names.size()) {
      continue;
    }
    const std::string& name = trace.counter_names[static_cast<std::size_t>(counter.series)];
    events.push_back({{"ph", "C"}, {"name", name}, {"cat", "queue_depth"},
                      {"pid", counter.process}, {"ts", us(counter.at)},
                      {"args", {{"tokens", counter.value}}}});
  }
}

}  // namespace

nlohmann::json chrome_trace_json(const Trace& trace, const std::vector<std::string>& layer_names) {
  const TraceClock us{trace_origin(trace)};
  nlohmann::json events = nlohmann::json::array();
  add_names(trace, events);
  add_spans(trace, layer_names, us, events);
  add_flows(trace, us, events);
  add_counters(trace, us, events);
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

}  // namespace cnnbench
