// The core probes' kernels (a multiply-add loop, a read stream) and what the sweep concludes from
// their rates: each core's median and the probes that fell below it.
#include "core_probe.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

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
// About a millisecond a run where a round trip takes 500 ns. A run ends early past
// handoff_run_limit_s (a partner core that another process holds answers once per time slice),
// with the mean of the trips it made.
constexpr int handoff_round_trips = 2000;
constexpr double handoff_run_limit_s = 0.02;
constexpr double handoff_give_up_s = 1;

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

namespace {

// One cache line the two threads take turns writing: the caller writes an odd value, the partner
// answers with the next even one. `stop` ends the partner's loop.
struct alignas(64) HandoffLine {
  std::atomic<std::uint32_t> value{0};
};
struct alignas(64) HandoffStop {
  std::atomic<bool> stop{false};
};

// Stops the answering thread and joins it when the probe leaves, by its end or an error.
struct StopAndJoin {
  HandoffStop& stop;
  std::thread& thread;
  ~StopAndJoin() {
    stop.stop.store(true, std::memory_order_relaxed);
    if (thread.joinable()) thread.join();
  }
};

}  // namespace

Handoff CoreProbe::handoff(int core, int partner, double slowdown) {
  CNNBENCH_CHECK(slowdown >= 1, "a probe slowdown below 1");
  const AffinityGuard restore;
  pin_current_thread(core);
  HandoffLine line;
  HandoffStop stop;
  std::atomic<int> partner_state{0};  // 1: pinned and answering; -1: could not pin
  std::thread answering([&] {
    try {
      pin_current_thread(partner);
    } catch (const Error&) {
      partner_state.store(-1, std::memory_order_release);
      return;
    }
    partner_state.store(1, std::memory_order_release);
    while (!stop.stop.load(std::memory_order_relaxed)) {
      const std::uint32_t v = line.value.load(std::memory_order_acquire);
      if (v & 1u) line.value.store(v + 1, std::memory_order_release);
    }
  });
  const StopAndJoin finish{stop, answering};
  while (partner_state.load(std::memory_order_acquire) == 0) std::this_thread::yield();
  if (partner_state.load(std::memory_order_acquire) < 0) {
    fail("could not pin a thread to core " + std::to_string(partner) + " for the handoff probe");
  }
  // With a slowdown, `slowdown` trips count as one.
  const auto trips = static_cast<int>(std::lround(handoff_round_trips * slowdown));
  double best_ns = 1e30;
  for (int r = 0; r < runs_per_rate; ++r) {
    const auto start = std::chrono::steady_clock::now();
    int made = 0;
    double seconds = 0;
    while (made < trips) {
      for (int i = 0; i < 64 && made < trips; ++i, ++made) {
        const std::uint32_t sent = line.value.load(std::memory_order_relaxed) + 1;  // odd
        line.value.store(sent, std::memory_order_release);
        for (std::uint32_t spins = 1; line.value.load(std::memory_order_acquire) == sent; ++spins) {
          // A partner that a higher-priority process keeps off its core never answers.
          if (spins % 65536 == 0 && seconds_since(start) > handoff_give_up_s) {
            fail("core " + std::to_string(partner) + " did not answer the handoff probe in " +
                 std::to_string(static_cast<int>(handoff_give_up_s)) + " s");
          }
        }
      }
      seconds = seconds_since(start);
      if (seconds > handoff_run_limit_s) break;
    }
    best_ns = std::min(best_ns, seconds / made * slowdown * 1e9);
  }
  return {best_ns};
}

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
  if (slow()) {
    return std::max({compute_slow ? compute : 0.0, memory_slow ? memory : 0.0,
                     handoff_slow ? handoff : 0.0});
  }
  return std::max({compute, memory, handoff});
}

std::string CoreDrop::which() const {
  std::string names;
  for (const auto& [past, name] : {std::pair{compute_slow, "compute"}, std::pair{memory_slow, "memory"},
                                   std::pair{handoff_slow, "handoff"}}) {
    if (!past) continue;
    names += (names.empty() ? "" : " and ") + std::string(name);
  }
  return names.empty() ? "compute" : names;
}

CoreDrop core_drop(const CoreProbeRecord& probe, const CoreMedianRecord& median) {
  const auto drop = [](double value, double usual) { return usual > 0 ? std::max(0.0, 1 - value / usual) : 0.0; };
  CoreDrop d;
  d.compute = drop(probe.compute_gflops, median.compute_gflops);
  d.memory = drop(probe.memory_gbps, median.memory_gbps);
  d.compute_slow = d.compute > std::max(slow_core_threshold, median.compute_threshold.value_or(0));
  d.memory_slow = d.memory > std::max(slow_core_threshold, median.memory_threshold.value_or(0));
  if (probe.handoff_ns && median.handoff_ns) {
    d.handoff_probed = true;
    d.handoff = drop(*median.handoff_ns, *probe.handoff_ns);  // the rate is 1 / round trip
    d.handoff_slow = d.handoff > std::max(slow_core_threshold, median.handoff_threshold.value_or(0));
  }
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
    std::vector<double> compute, memory, handoff;
    for (const CoreProbeRecord& p : probes) {
      if (p.core != core) continue;
      compute.push_back(p.compute_gflops);
      memory.push_back(p.memory_gbps);
      if (p.handoff_ns) handoff.push_back(*p.handoff_ns);
    }
    CoreMedianRecord m;
    m.core = core;
    m.compute_gflops = median(compute);
    m.memory_gbps = median(memory);
    if (!handoff.empty()) m.handoff_ns = median(handoff);
    const auto enough = [](const std::vector<double>& rates) {
      return rates.size() >= static_cast<std::size_t>(slow_core_min_probes);
    };
    const auto threshold = [](double spread) {
      return std::max(slow_core_threshold, slow_core_spreads * spread);
    };
    if (enough(compute)) {
      m.compute_spread = relative_spread(compute, m.compute_gflops);
      m.memory_spread = relative_spread(memory, m.memory_gbps);
      m.compute_threshold = threshold(*m.compute_spread);
      m.memory_threshold = threshold(*m.memory_spread);
    }
    if (enough(handoff)) {
      m.handoff_spread = relative_spread(handoff, *m.handoff_ns);
      m.handoff_threshold = threshold(*m.handoff_spread);
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
                 (slowest->drop.memory_slow && drop->memory_slow) ||
                 (slowest->drop.handoff_slow && drop->handoff_slow))) {
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
         " (expected CORE:PROBE:FACTOR[:compute|:memory|:handoff], FACTOR at least 1)");
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
    if (parts[3] != "compute" && parts[3] != "memory" && parts[3] != "handoff") {
      return bad("the rate is none of compute, memory, handoff");
    }
    slowdown.compute = parts[3] == "compute";
    slowdown.memory = parts[3] == "memory";
    slowdown.handoff = parts[3] == "handoff";
  }
  return slowdown;
}

}  // namespace cnnbench
