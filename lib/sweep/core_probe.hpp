// Core probes: a fixed compute loop and a fixed memory stream, pinned to one core at a time, and a
// cache line handed back and forth between each core and the first one. Run between a sweep's
// rounds, they show when a core did less work per second than usual (a shared virtual machine's
// core can, for minutes, without a thread of ours being descheduled) or when data took longer to
// pass between the cores (a virtual core moved to another die), and which repetitions ran then.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cnnbench/records.hpp"
#include "cnnbench/sweep.hpp"

namespace cnnbench {

// A probe this fraction below its core's median probe (compute or memory) marks the core slow, or
// more where the rate spreads wider over the sweep: slow_core_spreads times its robust relative
// spread (1.4826 MAD / median, a standard deviation for normal noise), measured once a core has
// slow_core_min_probes probes. A shared machine's memory stream alone spreads by about a tenth
// from one probe to the next, and a floor under that noise would mark every round.
inline constexpr double slow_core_threshold = 0.10;
inline constexpr double slow_core_spreads = 3.0;
inline constexpr int slow_core_min_probes = 5;

struct CoreSpeed {
  double compute_gflops = 0, memory_gbps = 0;
};

// A line's round trip between two cores takes tens of nanoseconds when they share a last-level
// cache and hundreds when they do not (another die or socket): every byte a 2-core data-parallel
// or pipelined step passes between its cores goes that way.
struct Handoff {
  double round_trip_ns = 0;
};

class CoreProbe {
 public:
  CoreProbe();  // allocates and touches the stream's buffer (64 MiB: past the last-level cache)
  // Pins the calling thread to `core` (its affinity put back after) and measures both rates, each
  // the best of a few short runs so that one interrupt does not read as a slow core. A slowdown
  // factor > 1 (the test hook, ProbeSlowdown) runs that much more work for the same counted work.
  CoreSpeed measure(int core, double compute_slowdown = 1, double memory_slowdown = 1);
  // The calling thread pinned to `core` and a helper thread pinned to `partner` pass one cache
  // line back and forth: the best of a few runs' mean round trip. A slowdown factor > 1 (the test
  // hook) counts that many round trips as one.
  Handoff handoff(int core, int partner, double slowdown = 1);

 private:
  std::vector<std::uint64_t> buffer_;
};

// How far a probe fell below its core's median, as fractions (0 when at or above it), and which
// rates fell past their threshold.
// The handoff counts as a rate too: 1 / round trip, so that a round trip twice its median is a
// drop of 50%.
struct CoreDrop {
  double compute = 0, memory = 0, handoff = 0;
  bool handoff_probed = false;  // the probe and the median both have a handoff
  bool compute_slow = false, memory_slow = false, handoff_slow = false;
  bool slow() const { return compute_slow || memory_slow || handoff_slow; }
  // The largest drop of the rates past their threshold (of all when none is).
  double worst() const;
  // "compute", "memory", "handoff", or those past their threshold joined by "and".
  std::string which() const;
};
CoreDrop core_drop(const CoreProbeRecord& probe, const CoreMedianRecord& median);
// Each core's median compute and memory rates over `probes`, in core order, with each rate's
// spread and threshold (slow_core_threshold, or slow_core_spreads spreads where that is more).
std::vector<CoreMedianRecord> core_medians(std::span<const CoreProbeRecord> probes);

// The slowest of `cores` in the probes around round `round` (probe `round` before it, `round + 1`
// after it) when one of them is past its threshold below its median; none otherwise. `every_core`:
// every core of the machine probed then was past its threshold in the same rate (the machine or
// its host slowed, not one core).
struct SlowProbe {
  int core = 0;
  int probe = 0;
  CoreDrop drop;
  bool every_core = false;
};
std::optional<SlowProbe> slow_probe_around(const CoreProbesRecord& probes, std::span<const int> cores,
                                           int round);

}  // namespace cnnbench
