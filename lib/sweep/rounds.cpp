// The order of a sweep's work: every point prepared in turn (calibration, time to accuracy, trace,
// warm-up), then rounds that take one repetition of every point (its paired serial one first), so
// that a machine whose speed drifts over minutes moves every point's range alike instead of one
// point's; core probes before the first round and after every round; and one more try, at the
// end, of each repetition that ran while a core it used was slow.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "cnnbench/core.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/topology.hpp"
#include "runner.hpp"

namespace cnnbench {

using nlohmann::json;

namespace {

// Serial time per step over the point's time per step: > 1 when the point is faster.
double paired_ratio(const Repetition& serial, const Repetition& point) {
  return (serial.seconds / static_cast<double>(serial.steps)) / (point.seconds / static_cast<double>(point.steps));
}

std::vector<double> times_of(const SeriesRun& series) {
  std::vector<double> times;
  for (const Repetition& rep : series.timed) times.push_back(rep.seconds);
  return times;
}

}  // namespace

void SweepRunner::run_plan(const std::vector<PointSpec>& plan, const std::map<std::string, PointRecord>& kept) {
  runs_.clear();
  for (const PointSpec& point : plan) {
    PointRun run;
    run.spec = point;
    const auto old = kept.find(point.id());
    if (old != kept.end()) {
      run.settled = old->second;
    } else {
      cost_total_ += preparation_cost(point) + options_.repeat * repetition_cost(point);
    }
    runs_.push_back(std::move(run));
  }
  for (std::size_t i = 0; i < runs_.size(); ++i) {
    PointRun& run = runs_[i];
    if (run.settled) continue;
    if (!options_.quiet) {
      const double left = eta();
      std::fprintf(stderr, "[%zu/%zu] %-22s preparing %s\n", i + 1, runs_.size(), run.spec.id().c_str(),
                   left >= 0 ? ("ETA " + duration_text(left)).c_str() : "");
    }
    const double started = now_seconds();
    prepare(run);
    seconds_done_ += now_seconds() - started;
    cost_done_ += preparation_cost(run.spec);
    if (run.settled) cost_total_ -= options_.repeat * repetition_cost(run.spec);
    update_report();
  }
  if (std::none_of(runs_.begin(), runs_.end(), [](const PointRun& r) { return r.taking_rounds(); })) return;
  core_probe_ = std::make_unique<CoreProbe>();
  probes_ = CoreProbesRecord{};
  probes_.threshold = slow_core_threshold;
  probe_cores(0);
  double last_round_s = 0;
  for (int round = 0; round < options_.repeat; ++round) {
    if (round > 0 && options_.deadline_s > 0 && now_seconds() + last_round_s > options_.deadline_s) {
      rounds_cut_ = true;
      if (!options_.quiet) {
        std::fprintf(stderr, "the deadline ends the rounds after %d of %d (a round takes %s)\n", round,
                     options_.repeat, duration_text(last_round_s).c_str());
      }
      break;
    }
    const double round_start = now_seconds();
    if (!options_.quiet) {
      const double left = eta();
      std::fprintf(stderr, "round %d/%d %s\n", round + 1, options_.repeat,
                   left >= 0 ? ("ETA " + duration_text(left)).c_str() : "");
    }
    take_round(round);
    probe_cores(round + 1);
    update_report();
    last_round_s = now_seconds() - round_start;
  }
  find_slow_repetitions();
  retry_slow_repetitions();
  if (!rounds_cut_) measure_allreduce_again();
  update_report();
}

// What a point measures once, before the rounds: whether it can run here, its steps, its launch
// command, its time to accuracy and trace (neither is a timed repetition), and its warm-ups.
void SweepRunner::prepare(PointRun& run) {
  const PointSpec& point = run.spec;
  if (std::optional<PointRecord> skipped = unrunnable(point)) {
    run.settled = std::move(skipped);
    if (!options_.quiet) std::fprintf(stderr, "    skipped: %s\n", run.settled->reason.c_str());
    return;
  }
  if (point.strategy == "cluster" && report_.allreduce.is_null()) measure_allreduce();
  run.record = point_header(point);
  for (int core : baseline_cores(point)) run.series.push_back(SeriesRun{core, {}, {}});
  try {
    if (options_.min_time > 0) {
      run.record.calibration = calibrate_steps(point, run.series.front().core);
      run.steps = run.record.calibration->probes.back().steps;
    }
    if (point.strategy == "cluster") run.record.launch = launcher_.record(launched_train_command(point, run.steps));
    if (options_.target_accuracy) run.record.time_to_accuracy = time_to_accuracy(point);
    stop_check();
    if (options_.trace_dir) {
      try {
        run.record.trace = trace_point(point, run.series.back().core, run.steps).string();
      } catch (const Error& e) {
        if (!options_.quiet) std::fprintf(stderr, "    warning: no trace of %s: %s\n", point.id().c_str(), e.what());
      }
    }
    for (int w = 0; w < options_.warmup; ++w) {
      const TakenRepetition warmup = take_repetition(run, std::nullopt);
      if (warmup.pair) run.pair_warmup_times.push_back(warmup.pair->seconds);
      for (std::size_t k = 0; k < run.series.size(); ++k) run.series[k].warmup_times.push_back(warmup.runs[k].seconds);
    }
  } catch (const PointDiverged& d) {
    settle(run, "diverged", d.reason);
    return;
  } catch (const Error& e) {
    settle(run, "failed", e.what());
    return;
  }
  run.prepared = true;
}

void SweepRunner::settle(PointRun& run, const std::string& status, const std::string& reason) {
  PointRecord record = not_measured(run.spec, status, reason);
  record.launch = run.record.launch;
  run.settled = std::move(record);
  if (!options_.quiet) std::fprintf(stderr, "    %s %s: %s\n", run.spec.id().c_str(), status.c_str(), reason.c_str());
}

TakenRepetition SweepRunner::take_repetition(PointRun& run, std::optional<std::size_t> only_series) {
  TakenRepetition taken;
  if (const std::optional<PairedBaseline> pair = paired_baseline_of(run)) {
    taken.pair = run_in_process(pair->point, pair->core, pair->steps);
    stop_check();
  }
  for (std::size_t k = 0; k < run.series.size(); ++k) {
    if (only_series && *only_series != k) continue;
    taken.runs.push_back(run_point(run.spec, run.series[k].core, run.steps));
    stop_check();
  }
  return taken;
}

void SweepRunner::take_round(int round) {
  for (PointRun& run : runs_) {
    if (!run.taking_rounds()) continue;
    const double started = now_seconds();
    TakenRepetition taken;
    try {
      taken = take_repetition(run, std::nullopt);
    } catch (const PointDiverged& d) {
      settle(run, "diverged", d.reason);
    } catch (const Error& e) {
      settle(run, "failed", e.what());
    }
    if (run.settled) {
      cost_total_ -= static_cast<double>(options_.repeat - round) * repetition_cost(run.spec);
      continue;
    }
    seconds_done_ += now_seconds() - started;
    cost_done_ += repetition_cost(run.spec);
    if (taken.pair) run.pair_timed.push_back(*taken.pair);
    for (std::size_t k = 0; k < run.series.size(); ++k) run.series[k].timed.push_back(std::move(taken.runs[k]));
    run.rounds.push_back(round);
    run.started_s.push_back(started - start_s_);
  }
}

PointRun* SweepRunner::run_of(const std::string& id) {
  for (PointRun& run : runs_) {
    if (run.spec.id() == id) return &run;
  }
  return nullptr;
}

// The serial point of the same model, on the core its pairs run on, once it is measured or
// prepared; fixed for the point from its first pair on.
std::optional<PairedBaseline> SweepRunner::paired_baseline_of(PointRun& run) {
  if (run.spec.strategy == "serial") return std::nullopt;
  if (run.pair) return run.pair;
  const PointSpec serial{run.spec.model, "serial", 1, 1};
  PointRun* baseline = run_of(serial.id());
  if (baseline == nullptr) return std::nullopt;
  if (baseline->settled) {
    const PointRecord& kept = *baseline->settled;
    if (!kept.measured()) return std::nullopt;
    run.pair = PairedBaseline{serial, kept.baseline_cores ? kept.baseline_cores->chosen : -1, kept.steps.value_or(-1)};
  } else if (baseline->prepared) {
    run.pair = PairedBaseline{serial, decide_pair_core(*baseline), baseline->steps};
  }
  return run.pair;
}

// The baseline core every pair runs on: the one whose serial runs so far (warm-ups, then
// repetitions: the serial point is the first of every round) took least time, decided once so that
// every pair of the sweep runs on the same core. The report's chosen core is decided again from
// all of the baseline's repetitions and may differ; each point's paired_baseline.core says.
int SweepRunner::decide_pair_core(PointRun& serial) const {
  if (serial.pair_core) return *serial.pair_core;
  int best = serial.series.back().core;
  double best_time = std::numeric_limits<double>::infinity();
  for (const SeriesRun& s : serial.series) {
    std::vector<double> times = s.warmup_times;
    for (const Repetition& rep : s.timed) times.push_back(rep.seconds);
    if (times.empty()) continue;
    const double median = summarize(times).median;
    if (median < best_time) {
      best_time = median;
      best = s.core;
    }
  }
  serial.pair_core = best;
  return best;
}

// The record of a prepared point from the rounds it took.
PointRecord SweepRunner::measured_record(const PointRun& run) const {
  PointRecord record = run.record;
  std::size_t best = 0;
  for (std::size_t k = 1; k < run.series.size(); ++k) {
    if (summarize(times_of(run.series[k])).median < summarize(times_of(run.series[best])).median) best = k;
  }
  const auto rates_of = [&](const SeriesRun& s) {
    std::vector<double> rates;
    for (const Repetition& rep : s.timed) rates.push_back(static_cast<double>(rep.steps) * options_.batch / rep.seconds);
    return rates;
  };
  if (run.series.size() > 1) {
    BaselineCoresRecord per_core{run.series[best].core, {}};
    for (const SeriesRun& s : run.series) {
      per_core.per_core.push_back({s.core, times_of(s), summarize(rates_of(s))});
    }
    record.baseline_cores = per_core;
  }
  const SeriesRun& chosen = run.series[best];
  record.times_s = times_of(chosen);
  record.warmup_times_s = chosen.warmup_times;
  record.time = summarize(record.times_s);
  record.images_per_s = summarize(rates_of(chosen));
  record.steps = chosen.timed.front().steps;
  record.batch = options_.batch;
  keep_median_repetition(record, chosen.timed);
  record.rounds = run.rounds;
  record.started_s = run.started_s;
  if (static_cast<int>(run.rounds.size()) < options_.repeat) record.rounds_done = static_cast<int>(run.rounds.size());
  if (run.pair && !run.pair_timed.empty()) {
    PairedBaselineRecord paired;
    if (run.pair->core >= 0) paired.core = run.pair->core;
    paired.warmup_times_s = run.pair_warmup_times;
    paired.steps = run.pair_timed.front().steps;
    for (std::size_t i = 0; i < run.pair_timed.size(); ++i) {
      paired.times_s.push_back(run.pair_timed[i].seconds);
      paired.ratios.push_back(paired_ratio(run.pair_timed[i], chosen.timed[i]));
    }
    record.paired_baseline = paired;
  }
  record.slow_core_warnings = run.warnings;
  return record;
}

// Every point with something to show, in the plan's order: kept, skipped, failed and diverged
// ones as they are, prepared ones once they took a round (marked with rounds_done until their last).
void SweepRunner::collect_points() {
  report_.points.clear();
  for (const PointRun& run : runs_) {
    if (run.settled) {
      report_.points.push_back(*run.settled);
    } else if (run.prepared && !run.rounds.empty()) {
      report_.points.push_back(measured_record(run));
    }
  }
  if (!probes_.probes.empty()) {
    probes_.medians = core_medians(probes_.probes);
    report_.core_probes = probes_;
  }
  add_scaling_analysis(report_);
}

void SweepRunner::update_report() {
  collect_points();
  save();
}

double SweepRunner::eta() const {
  return cost_done_ > 0 ? seconds_done_ / cost_done_ * std::max(0.0, cost_total_ - cost_done_) : -1;
}

// ---- core probes ---------------------------------------------------------------------------------

// Probe `probe` of every core (probe k before round k): its rates, and past the first core its
// handoff with the first. A machine that refuses to pin a thread gets no probes, and says so once.
void SweepRunner::probe_cores(int probe) {
  if (!core_probe_) return;
  const int cores = machine_topology().cores;
  for (int core = 0; core < cores; ++core) {
    const std::optional<ProbeSlowdown>& hook = options_.probe_slowdown;
    const bool slowed = hook && hook->core == core && hook->probe == probe;
    const double started = now_seconds() - start_s_;
    try {
      const CoreSpeed speed = core_probe_->measure(core, slowed && hook->compute ? hook->factor : 1,
                                                   slowed && hook->memory ? hook->factor : 1);
      CoreProbeRecord record{probe, core, speed.compute_gflops, speed.memory_gbps, started, {}};
      if (core > 0) {
        record.handoff_ns =
            core_probe_->handoff(core, 0, slowed && hook->handoff ? hook->factor : 1).round_trip_ns;
      }
      probes_.probes.push_back(record);
    } catch (const Error& e) {
      if (!options_.quiet) std::fprintf(stderr, "warning: no core probes: %s\n", e.what());
      core_probe_.reset();
      return;
    }
    stop_check();
  }
}

// The cores a repetition used: those its pin map names (every core when a thread of it was not
// pinned, or it says nothing), and its paired serial repetition's.
std::vector<int> SweepRunner::repetition_cores(const PointRun& run, std::size_t k, const Repetition& rep) const {
  const int machine = machine_topology().cores;
  bool everywhere = !rep.pin_map.is_array() || rep.pin_map.empty();
  std::vector<int> cores;
  if (rep.pin_map.is_array()) {
    for (const json& entry : rep.pin_map) {
      const int core = entry.is_object() ? entry.value("core", -1) : -1;
      if (core < 0) everywhere = true;
      else cores.push_back(core % machine);
    }
  }
  if (run.series[k].core >= 0) cores.push_back(run.series[k].core % machine);
  if (run.pair) {
    if (run.pair->core < 0) everywhere = true;
    else cores.push_back(run.pair->core % machine);
  }
  if (everywhere) {
    for (int core = 0; core < machine; ++core) cores.push_back(core);
  }
  std::sort(cores.begin(), cores.end());
  cores.erase(std::unique(cores.begin(), cores.end()), cores.end());
  return cores;
}

void SweepRunner::find_slow_repetitions() {
  if (probes_.probes.empty()) return;
  probes_.medians = core_medians(probes_.probes);
  for (PointRun& run : runs_) {
    if (!run.taking_rounds()) continue;
    for (std::size_t k = 0; k < run.series.size(); ++k) {
      for (std::size_t i = 0; i < run.series[k].timed.size(); ++i) {
        const Repetition& rep = run.series[k].timed[i];
        const std::vector<int> cores = repetition_cores(run, k, rep);
        const std::optional<SlowProbe> slow = slow_probe_around(probes_, cores, run.rounds[i]);
        if (!slow) continue;
        SlowCoreWarningRecord warning;
        warning.core = slow->core;
        warning.round = run.rounds[i];
        warning.probe = slow->probe;
        if (run.series.size() > 1) warning.series_core = run.series[k].core;
        warning.drop = slow->drop.worst();
        warning.compute_drop = slow->drop.compute;
        warning.memory_drop = slow->drop.memory;
        if (slow->drop.handoff_probed) warning.handoff_drop = slow->drop.handoff;
        warning.dropped = slow->drop.which();
        warning.every_core = slow->every_core;
        warning.seconds = rep.seconds;
        if (!run.pair_timed.empty()) {
          warning.baseline_seconds = run.pair_timed[i].seconds;
          warning.ratio = paired_ratio(run.pair_timed[i], rep);
        }
        warning.used = "original";
        char text[400];
        std::snprintf(text, sizeof text, "core %d's %s rate was %.0f%% below its median at probe %d, %s round %d%s%s",
                      warning.core, warning.dropped.c_str(), 100 * warning.drop, warning.probe,
                      warning.probe == warning.round ? "before" : "after", warning.round,
                      slow->drop.handoff_slow
                          ? " (a cache line took longer between it and core 0: the cores further apart, "
                            "as a virtual core moved to another die would be, or their link busier)"
                          : "",
                      warning.every_core ? " (every core's was: the machine or its host slowed, not one core)" : "");
        warning.message = text;
        run.warnings.push_back(std::move(warning));
      }
    }
  }
}

// True when a probe of each of `cores` now finds it within its thresholds of its median.
bool SweepRunner::cores_normal(std::span<const int> cores) {
  if (!core_probe_) return false;
  bool normal = true;
  for (int core : cores) {
    const auto median = std::find_if(probes_.medians.begin(), probes_.medians.end(),
                                     [&](const CoreMedianRecord& m) { return m.core == core; });
    if (median == probes_.medians.end()) return false;
    const CoreSpeed speed = core_probe_->measure(core);
    CoreProbeRecord probe{-1, core, speed.compute_gflops, speed.memory_gbps, 0, {}};
    if (core > 0 && median->handoff_ns) probe.handoff_ns = core_probe_->handoff(core, 0).round_trip_ns;
    if (core_drop(probe, *median).slow()) normal = false;
    stop_check();
  }
  return normal;
}

// Each flagged repetition once more, probed before and after: the retry's times stand in for the
// original's when both probes found its cores normal; the warning keeps both.
void SweepRunner::retry_slow_repetitions() {
  for (PointRun& run : runs_) {
    if (!run.taking_rounds()) continue;
    for (SlowCoreWarningRecord& warning : run.warnings) {
      if (warning.retry) continue;
      std::size_t k = 0;
      while (warning.series_core && run.series[k].core != *warning.series_core) ++k;
      const auto at = std::find(run.rounds.begin(), run.rounds.end(), warning.round);
      const auto i = static_cast<std::size_t>(at - run.rounds.begin());
      // A deadline (`tune --budget`) holds for the retries too: one that would end after it, at
      // the slow repetition's own length and its pair's, is not run. (A busy stretch flags most
      // repetitions of a round; retried one by one they took a 120 s tune to 179 s.)
      const double retry_s = run.series[k].timed[i].seconds + (i < run.pair_timed.size() ? run.pair_timed[i].seconds : 0.0);
      if (options_.deadline_s > 0 && now_seconds() + retry_s > options_.deadline_s) {
        warning.message += "; not retried: the deadline";
        continue;
      }
      if (!options_.quiet) {
        std::fprintf(stderr, "retrying %s round %d: %s\n", run.spec.id().c_str(), warning.round,
                     warning.message.c_str());
      }
      const std::vector<int> cores = repetition_cores(run, k, run.series[k].timed[i]);
      const bool normal_before = cores_normal(cores);
      TakenRepetition taken;
      try {
        taken = take_repetition(run, k);
      } catch (const PointDiverged& d) {
        warning.message += "; its retry diverged: " + d.reason;
        continue;
      } catch (const Error& e) {
        warning.message += "; its retry failed: " + std::string(e.what());
        continue;
      }
      RetryRecord retry;
      retry.seconds = taken.runs.front().seconds;
      if (taken.pair) {
        retry.baseline_seconds = taken.pair->seconds;
        retry.ratio = paired_ratio(*taken.pair, taken.runs.front());
      }
      retry.probe_normal = normal_before && cores_normal(cores);
      warning.retry = retry;
      if (!retry.probe_normal) continue;
      warning.used = "retry";
      run.series[k].timed[i] = std::move(taken.runs.front());
      if (taken.pair) run.pair_timed[i] = std::move(*taken.pair);
    }
  }
}

}  // namespace cnnbench
