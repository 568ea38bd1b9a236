// The core probes' kernels (a multiply-add loop, a read stream) and what the sweep concludes from
// their rates: each core's median and the probes that fell below it.
#include "core_probe.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "cnnbench/core.hpp"
#include "cnnbench/quantile.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/topology.hpp"

namespace cnnbench {

namespace {

// Sized so that both loops take about a millisecond a run on the 2-core machine.
constexpr std::int64_t compute_iterations = 1 << 18;
constexpr int compute_chains = 8;  // independent multiply-add chains: throughput, not latency
constexpr std::size_t stream_bytes = std::size_t{64} << 20;
constexpr int runs_per_rate = 3;

volatile float compute_sink = 0;
volatile std::uint64_t stream_sink = 0;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Seconds for `iterations` rounds of a multiply-add on every chain.
double compute_seconds(std::int64_t iterations) {
  float chain[compute_chains];
  for (int c = 0; c < compute_chains; ++c) chain[c] = 1.0f + 0.1f * static_cast<float>(c);
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < iterations; ++i) {
    for (float& x : chain) x = x * 0.999f + 0.001f;
  }
  const double seconds = seconds_since(start);
  float sum = 0;
  for (float x : chain) sum += x;
  compute_sink = sum;
  return seconds;
}

// Seconds for `passes` reads of the whole buffer.
double stream_seconds(const std::vector<std::uint64_t>& buffer, int passes) {
  std::uint64_t sum = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int p = 0; p < passes; ++p) {
    for (std::uint64_t word : buffer) sum += word;
  }
  const double seconds = seconds_since(start);
  stream_sink = sum;
  return seconds;
}

}  // namespace

CoreProbe::CoreProbe() : buffer_(stream_bytes / sizeof(std::uint64_t), 1) {}

CoreSpeed CoreProbe::measure(int core, double compute_slowdown, double memory_slowdown) {
  CNNBENCH_CHECK(compute_slowdown >= 1 && memory_slowdown >= 1, "a probe slowdown below 1");
  const AffinityGuard restore;
  pin_current_thread(core);
  const auto run_iterations = static_cast<std::int64_t>(std::llround(compute_iterations * compute_slowdown));
  const int passes = std::max(1, static_cast<int>(std::lround(memory_slowdown)));
  double compute_s = 1e30, stream_s = 1e30;
  for (int r = 0; r < runs_per_rate; ++r) {
    compute_s = std::min(compute_s, compute_seconds(run_iterations));
    stream_s = std::min(stream_s, stream_seconds(buffer_, passes));
  }
  CoreSpeed speed;
  speed.compute_gflops = 2.0 * compute_chains * static_cast<double>(compute_iterations) / compute_s / 1e9;
  speed.memory_gbps = static_cast<double>(stream_bytes) / stream_s / 1e9;
  return speed;
}

double CoreDrop::worst() const {
  if (slow()) return std::max(compute_slow ? compute : 0.0, memory_slow ? memory : 0.0);
  return std::max(compute, memory);
}

std::string CoreDrop::which() const {
  if (compute_slow && memory_slow) return "compute and memory";
  return memory_slow ? "memory" : "compute";
}

CoreDrop core_drop(const CoreProbeRecord& probe, const CoreMedianRecord& median) {
  const auto drop = [](double value, double usual) { return usual > 0 ? std::max(0.0, 1 - value / usual) : 0.0; };
  CoreDrop d;
  d.compute = drop(probe.compute_gflops, median.compute_gflops);
  d.memory = drop(probe.memory_gbps, median.memory_gbps);
  d.compute_slow = d.compute > std::max(slow_core_threshold, median.compute_threshold.value_or(0));
  d.memory_slow = d.memory > std::max(slow_core_threshold, median.memory_threshold.value_or(0));
  return d;
}

namespace {

// 1.4826 MAD / median of `rates`: their standard deviation relative to the median where the noise
// is normal, and blind to a minority of slow probes (the ones to find).
double relative_spread(const std::vector<double>& rates, double median) {
  std::vector<double> deviation;
  for (double r : rates) deviation.push_back(std::abs(r - median));
  return median > 0 ? 1.4826 * cnnbench::median(deviation) / median : 0;
}

}  // namespace

std::vector<CoreMedianRecord> core_medians(std::span<const CoreProbeRecord> probes) {
  std::vector<int> cores;
  for (const CoreProbeRecord& p : probes) cores.push_back(p.core);
  std::sort(cores.begin(), cores.end());
  cores.erase(std::unique(cores.begin(), cores.end()), cores.end());
  std::vector<CoreMedianRecord> medians;
  for (int core : cores) {
    std::vector<double> compute, memory;
    for (const CoreProbeRecord& p : probes) {
      if (p.core != core) continue;
      compute.push_back(p.compute_gflops);
      memory.push_back(p.memory_gbps);
    }
    CoreMedianRecord m;
    m.core = core;
    m.compute_gflops = median(compute);
    m.memory_gbps = median(memory);
    if (compute.size() >= static_cast<std::size_t>(slow_core_min_probes)) {
      m.compute_spread = relative_spread(compute, m.compute_gflops);
      m.memory_spread = relative_spread(memory, m.memory_gbps);
      m.compute_threshold = std::max(slow_core_threshold, slow_core_spreads * *m.compute_spread);
      m.memory_threshold = std::max(slow_core_threshold, slow_core_spreads * *m.memory_spread);
    }
    medians.push_back(m);
  }
  return medians;
}

std::optional<SlowProbe> slow_probe_around(const CoreProbesRecord& probes, std::span<const int> cores,
                                           int round) {
  const auto drop_of = [&](const CoreProbeRecord& p) -> std::optional<CoreDrop> {
    const auto median = std::find_if(probes.medians.begin(), probes.medians.end(),
                                     [&](const CoreMedianRecord& m) { return m.core == p.core; });
    if (median == probes.medians.end()) return std::nullopt;
    return core_drop(p, *median);
  };
  std::optional<SlowProbe> slowest;
  for (const CoreProbeRecord& p : probes.probes) {
    if (p.probe != round && p.probe != round + 1) continue;
    if (std::find(cores.begin(), cores.end(), p.core) == cores.end()) continue;
    const std::optional<CoreDrop> drop = drop_of(p);
    if (drop && drop->slow() && (!slowest || drop->worst() > slowest->drop.worst())) {
      slowest = SlowProbe{p.core, p.probe, *drop};
    }
  }
  if (!slowest) return slowest;
  // Every core probed at that boundary slow in the same rate: the machine, not one core.
  int probed = 0, alike = 0;
  for (const CoreProbeRecord& p : probes.probes) {
    if (p.probe != slowest->probe) continue;
    ++probed;
    const std::optional<CoreDrop> drop = drop_of(p);
    if (drop && ((slowest->drop.compute_slow && drop->compute_slow) ||
                 (slowest->drop.memory_slow && drop->memory_slow))) {
      ++alike;
    }
  }
  slowest->every_core = probed > 1 && alike == probed;
  return slowest;
}

}  // namespace cnnbench

namespace cnnbench {

ProbeSlowdown parse_probe_slowdown(const std::string& text) {
  const auto bad = [&](const std::string& why) -> ProbeSlowdown {
    fail("CNNBENCH_TEST_PROBE_SLOWDOWN=" + text + ": " + why +
         " (expected CORE:PROBE:FACTOR[:compute|:memory], FACTOR at least 1)");
  };
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t colon = text.find(':', start);
    parts.push_back(text.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (parts.size() != 3 && parts.size() != 4) return bad("expected 3 or 4 fields");
  ProbeSlowdown slowdown;
  try {
    std::size_t used = 0;
    slowdown.core = std::stoi(parts[0], &used);
    if (used != parts[0].size() || slowdown.core < 0) return bad("CORE is not a core number");
    slowdown.probe = std::stoi(parts[1], &used);
    if (used != parts[1].size() || slowdown.probe < 0) return bad("PROBE is not a probe number");
    slowdown.factor = std::stod(parts[2], &used);
    if (used != parts[2].size() || !(slowdown.factor >= 1) || !std::isfinite(slowdown.factor)) {
      return bad("FACTOR is not a number of at least 1");
    }
  } catch (const std::exception&) {
    return bad("not a number");
  }
  if (parts.size() == 4) {
    if (parts[3] != "compute" && parts[3] != "memory") return bad("the rate is neither compute nor memory");
    slowdown.compute = parts[3] == "compute";
    slowdown.memory = parts[3] == "memory";
  }
  return slowdown;
}

}  // namespace cnnbench
