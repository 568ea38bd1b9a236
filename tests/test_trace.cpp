// --trace: the span ring keeps whole steps, the tracks are cut to the same last whole steps, the
// clock offset estimator finds a known offset through a made-up link, and every strategy's
// trace is a valid Chrome trace whose phases add up to the breakdown's (all steps kept). The
// stream's and the CLI's traces are checked against an independent reader in
// tests/py/test_trace_format.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "../lib/strategies/cluster/cluster_strategy.hpp"
#include "../lib/strategies/cluster/gradient_exchange.hpp"
#include "cnnbench/config.hpp"
#include "cnnbench/data.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/trace.hpp"
#include "cnnbench/train.hpp"
#include "short_run.hpp"
#include "simulated_ranks.hpp"

namespace cnnbench {
namespace {

Span span_of(std::int64_t step, ClockTicks start, ClockTicks end) {
  Span span;
  span.step = step;
  span.start = start;
  span.end = end;
  return span;
}

// ---- the ring and the common steps ------------------------------------------------------------

TEST(SpanRing, OverwritesTheOldestAndSaysFromWhichStepOnItHoldsWholeSteps) {
  SpanRing ring(2, 3);  // two steps of three spans
  for (std::int64_t step = 0; step < 3; ++step) {
    for (int i = 0; i < 3; ++i) ring.push(span_of(step, 10 * step + i, 10 * step + i + 1));
    ring.end_step();
  }
  // Room for 2 + 1 steps of 3: nothing overwritten yet.
  EXPECT_EQ(ring.first_whole_step(), 0);
  ring.push(span_of(3, 30, 31));
  EXPECT_EQ(ring.first_whole_step(), 1);  // step 0's first span is gone
  const std::vector<Span> spans = ring.spans();
  ASSERT_EQ(spans.size(), 9u);
  EXPECT_EQ(spans.front().start, 1);
  EXPECT_EQ(spans.back().start, 30);
}

TEST(SpanRing, GrowsAtAStepsEndWhenAStepHoldsMoreThanPlanned) {
  SpanRing ring(2, 1);
  for (int i = 0; i < 5; ++i) ring.push(span_of(0, i, i + 1));  // 5 spans, room for 2
  EXPECT_EQ(ring.first_whole_step(), 1);                        // step 0 lost spans
  ring.end_step();
  for (std::int64_t step = 1; step < 3; ++step) {
    for (int i = 0; i < 5; ++i) ring.push(span_of(step, 10 * step + i, 10 * step + i + 1));
    ring.end_step();
  }
  // After the growth (3 x 5 spans) steps 1 and 2 are whole and nothing of them was lost.
  EXPECT_EQ(ring.first_whole_step(), 1);
  std::map<std::int64_t, int> per_step;
  for (const Span& span : ring.spans()) ++per_step[span.step];
  EXPECT_EQ(per_step[1], 5);
  EXPECT_EQ(per_step[2], 5);
}

TEST(Trace, KeepsTheLastWholeStepsThatEveryTrackHolds) {
  std::vector<TraceTrack> tracks(2);
  for (std::int64_t step = 0; step < 10; ++step) {
    tracks[0].spans.push_back(span_of(step, step, step + 1));
    tracks[1].spans.push_back(span_of(step, step, step + 1));
  }
  tracks[1].spans.push_back(span_of(10, 10, 11));  // a step the other track does not have
  tracks[0].first_whole_step = 7;                    // its ring overwrote part of step 6
  StepWindow window = keep_last_whole_steps(tracks, 5);
  EXPECT_EQ(window.first, 7);  // only 7, 8, 9 are whole on both
  EXPECT_EQ(window.last, 9);
  for (const TraceTrack& track : tracks) {
    std::set<std::int64_t> steps;
    for (const Span& span : track.spans) steps.insert(span.step);
    EXPECT_EQ(steps, (std::set<std::int64_t>{7, 8, 9}));
  }
  window = keep_last_whole_steps(tracks, 2);
  EXPECT_EQ(window.first, 8);
  EXPECT_EQ(tracks[0].spans.size(), 2u);
}

// ---- clock alignment ------------------------------------------------------------------------

// A made-up link to a reference whose clock runs `offset` ahead of ours: each ping takes a
// different time each way (queueing), and the reference reads its clock when the ping arrives.
TEST(ClockOffset, FindsAKnownOffsetWithinHalfTheShortestRoundTrip) {
  const ClockTicks offset = -3'250'000'000;  // the reference booted 3.25 s after us
  const std::vector<std::pair<ClockTicks, ClockTicks>> delays = {
      {90'000, 20'000}, {15'000, 14'000}, {400'000, 30'000}, {20'000, 80'000}};
  ClockTicks now = 1'000'000'000;
  std::size_t round = 0;
  const auto clock = [&] { return now; };
  const auto ping = [&] {
    const auto [out, back] = delays[round++ % delays.size()];
    now += out;
    const ClockTicks reference = now + offset;
    now += back;
    return reference;
  };
  const ClockTicks estimate = estimate_clock_offset(static_cast<int>(delays.size()), clock, ping);
  // The shortest round trip (15 + 14 us) bounds the error by its half; its asymmetry is 0.5 us.
  EXPECT_NEAR(double(estimate), double(offset), 14'500.0);
  EXPECT_NEAR(double(estimate), double(offset + (15'000 - 14'000) / 2), 1.0);
  // A span moved by the estimate lands where the reference's clock saw it.
  std::vector<TraceTrack> tracks(1);
  tracks[0].spans.push_back(span_of(0, 5'000'000'000, 5'000'001'000));
  shift_spans(tracks, estimate);
  EXPECT_NEAR(double(tracks[0].spans[0].start), double(5'000'000'000 + offset), 14'500.0);
}

// ---- every strategy's trace -----------------------------------------------------------------

// This file's runs are 24 steps long.
TrainConfig short_run(const std::string& strategy, int threads,
                      std::map<std::string, std::string> options = {}) {
  return testing::short_run(strategy, threads, 24, std::move(options));
}

// Per track, spans nest: sorted by start (longest first), each one ends before the enclosing
// one does or starts after it ended.
void expect_spans_nest(const TraceTrack& track) {
  std::vector<Span> spans = track.spans;
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.start != b.start ? a.start < b.start : a.end > b.end;
  });
  std::vector<ClockTicks> open;  // ends of the enclosing spans
  for (const Span& span : spans) {
    EXPECT_GE(span.end, span.start);
    while (!open.empty() && open.back() <= span.start) open.pop_back();
    if (!open.empty()) {
      EXPECT_LE(span.end, open.back()) << "a span overlaps its neighbour on track "
                                       << track.process << "/" << track.thread;
    }
    open.push_back(span.end);
  }
}

// The phases of every kept step (spans without a label: a label marks a call or a carved part
// nested in a phase) add up per category to what the breakdown says the worker spent, except
// the gaps under a microsecond the trace leaves out.
void expect_phases_match_breakdown(const Trace& trace, const TimeBreakdown& b, std::int64_t steps,
                                   const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(trace.tracks.size(), b.workers.size());
  for (std::size_t w = 0; w < trace.tracks.size(); ++w) {
    const TraceTrack& track = trace.tracks[w];
    expect_spans_nest(track);
    std::array<double, time_category_count> seconds{};
    std::set<std::int64_t> kept;
    for (const Span& span : track.spans) {
      kept.insert(span.step);
      if (span.label >= 0) continue;
      seconds[static_cast<std::size_t>(span.category)] += 1e-9 * double(span.end - span.start);
    }
    EXPECT_EQ(static_cast<std::int64_t>(kept.size()), steps);
    const double slack = 2e-6 * double(steps);
    for (const TimeCategory category : {TimeCategory::compute, TimeCategory::update,
                                        TimeCategory::communication_exposed,
                                        TimeCategory::imbalance_wait, TimeCategory::data}) {
      const double expected = b.workers[w].total[category];
      EXPECT_NEAR(seconds[static_cast<std::size_t>(category)], expected, slack + 1e-6 * expected)
          << time_category_key(category) << " of worker " << w;
    }
  }
}

TEST(Trace, SerialAndClusterPhasesAreTheBreakdownsSteps) {
  const Dataset data = make_synthetic(512, 3);
  RunOptions options;
  options.trace_steps = 30;  // more than run: every step is kept
  std::vector<std::pair<std::string, int>> runs = {{"serial", 1}};
  if (CNNBENCH_HAVE_MPI) runs.insert(runs.end(), {{"cluster", 1}, {"cluster", 2}});
  for (const auto& [strategy, threads] : runs) {
    const RunResult result = run_training(short_run(strategy, threads), data, options);
    expect_phases_match_breakdown(result.trace, result.time_breakdown, 24,
                                  strategy + " x" + std::to_string(threads));
    const nlohmann::json json =
        chrome_trace_json(result.trace, timed_layer_names(ModelKind::lenet5));
    for (const auto& event : json["traceEvents"]) {
      if (event["ph"] == "X") {
        EXPECT_TRUE(event["args"]["step"].is_number_integer());
      }
    }
  }
}

// Two simulated ranks, rank 1 three times slower: rank 0 waits for it at the collective. The
// trace itemises the group's calls (a span per bucket with its bytes) and labels the wait as the
// breakdown does: what it calls imbalance is imbalance_wait in the trace too.
TEST(Trace, ClusterItemisesTheCallsAndLabelsWaitsAsTheBreakdown) {
  const Dataset data = make_synthetic(1024, 3);
  const std::vector<std::uint32_t> order = epoch_order(data.count, 3, 0, true);
  for (const std::string overlap : {"off", "on"}) {
    SCOPED_TRACE("overlap " + overlap);
    const TrainConfig config = short_run("cluster", 1, {{"overlap", overlap}, {"slowdown", "1:3"}});
    testing::SimulatedJob job(2);
    Trace trace;
    TimeBreakdown breakdown;
    testing::run_simulated_ranks(job, [&](int rank, std::unique_ptr<testing::SimulatedRank> group) {
      Model model(config.model);
      init_params(model.params, config.model, 1);
      auto strategy = make_cluster_strategy(std::move(group));
      strategy->prepare(model, data, config);
      strategy->keep_trace(30);
      const StepCallback ignore = [](std::int64_t, double) {};
      strategy->run_steps({order.data(), 0, 6, 0}, ignore);
      strategy->run_steps({order.data(), 6, 4, 6}, ignore);
      Trace mine = strategy->trace();
      if (rank == 0) {
        trace = std::move(mine);
        breakdown = strategy->time_breakdown();
      }
    });
    expect_phases_match_breakdown(trace, breakdown, 10, "cluster 2x1");
    EXPECT_GT(breakdown.workers[0].total[TimeCategory::imbalance_wait], 0.0);
    // Bucket b's call carries its floats' bytes, as the buckets of the model cut them.
    const std::vector<GradientBucket> buckets =
        gradient_buckets(Model(config.model).spec(), gradient_bucket_bytes);
    std::map<std::string, std::int64_t> bytes;
    for (const Span& span : trace.tracks[0].spans) {
      if (span.label >= 0) bytes[trace.labels[static_cast<std::size_t>(span.label)]] = span.bytes;
    }
    if (overlap == "on") {
      for (std::size_t b = 0; b < buckets.size(); ++b) {
        const std::string name =
            "MPI_Iallreduce bucket " + std::to_string(b) + " (" + buckets[b].name + ")";
        ASSERT_TRUE(bytes.count(name)) << name;
        EXPECT_EQ(bytes[name], static_cast<std::int64_t>(4 * (buckets[b].end - buckets[b].begin)));
      }
    } else {
      ASSERT_TRUE(bytes.count("MPI_Iallreduce+wait gradient"));
      EXPECT_EQ(bytes["MPI_Iallreduce+wait gradient"],
                static_cast<std::int64_t>(4 * Model(config.model).params.size()));
    }
  }
}

TEST(Trace, StreamTracksHoldTheSameStepsOnEveryCore) {
  const Dataset data = make_synthetic(512, 3);
  RunOptions options;
  options.trace_steps = 5;
  for (const std::string widths : {"s=2", "s=1"}) {
    SCOPED_TRACE(widths);
    const RunResult result =
        run_training(short_run("stream", 2, {{"widths", widths}}), data, options);
    ASSERT_EQ(result.trace.tracks.size(), 2u);
    for (const TraceTrack& track : result.trace.tracks) {
      expect_spans_nest(track);
      std::set<std::int64_t> steps;
      for (const Span& span : track.spans) steps.insert(span.step);
      EXPECT_EQ(steps, (std::set<std::int64_t>{19, 20, 21, 22, 23}));
    }
    EXPECT_FALSE(result.trace.flows.empty());
    EXPECT_FALSE(result.trace.counters.empty());
  }
  EXPECT_TRUE(chrome_trace_json(Trace{}, {})["traceEvents"].empty());
}

}  // namespace
}  // namespace cnnbench
