// The tuner's planner on made-up profiles whose best setting is known: the candidate space, the
// step model of each strategy, the stream's firing cost from its profile run, and the choice of
// what to measure within a budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/tune.hpp"

namespace cnnbench {
namespace {

// Serial with every layer's time proportional to the batch (seconds per sample per layer).
TuneProfile linear_profile(ModelKind model, int cores, const std::map<std::string, double>& per_sample,
                           double data_per_sample, double update_s) {
  TuneProfile p;
  p.model = model;
  p.batch = 64;
  p.cores = cores;
  for (int b : {64, 32, 16, 8}) {
    BatchProfile x;
    x.batch = b;
    for (const auto& [layer, s] : per_sample) x.layer_s[layer] = s * b;
    x.data_s = data_per_sample * b;
    x.update_s = update_s;
    x.step_s = update_s + x.data_s;
    for (const auto& [layer, s] : x.layer_s) x.step_s += s;
    p.serial.push_back(x);
  }
  p.copy_bytes_per_s = 1e15;
  return p;
}

const TuneCandidate& best_of(std::vector<TuneCandidate>& candidates, const TuneProfile& profile) {
  for (TuneCandidate& c : candidates) predict_step(profile, c);
  return *std::min_element(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
    return a.predicted_step_s < b.predicted_step_s;
  });
}

TEST(TuneCandidates, EveryStrategyHasOneDefaultAndARealSpace) {
  for (ModelKind model : {ModelKind::fc3, ModelKind::lenet5}) {
    for (const std::string strategy : {"stream", "cluster", "blas"}) {
      const auto candidates = tune_candidates(model, strategy, 2, 64);
      EXPECT_EQ(std::count_if(candidates.begin(), candidates.end(), [](const auto& c) { return c.is_default; }), 1)
          << strategy;
      for (const auto& c : candidates) {
        if (c.is_default) {
          EXPECT_TRUE(c.options.empty()) << c.label;  // the sweep's own point
        }
        EXPECT_EQ(c.strategy, strategy);
      }
    }
  }
  // LeNet-5's stream on 2 cores: 2^5 widths x 3 micro-batches of the paper's graph, and the two
  // copies with 3 micro-batches x 2 balance modes.
  EXPECT_EQ(tune_candidates(ModelKind::lenet5, "stream", 2, 64).size(), 32u * 3 + 6);
  EXPECT_EQ(tune_candidates(ModelKind::fc3, "stream", 2, 64).size(), 8u * 3 + 6);
  // The cluster: 1 thread, and 2 threads x replicas/slices x static/dynamic; FC-3, whose first
  // layer is dense, factors too, which auto takes for it (its default).
  EXPECT_EQ(tune_candidates(ModelKind::lenet5, "cluster", 2, 64).size(), 5u);
  EXPECT_EQ(tune_candidates(ModelKind::fc3, "cluster", 2, 64).size(), 7u);
  for (const auto& [model, design] : {std::pair{ModelKind::lenet5, "1x2 replicas dynamic"},
                                      std::pair{ModelKind::fc3, "1x2 factors dynamic"}}) {
    for (const auto& c : tune_candidates(model, "cluster", 2, 64)) {
      EXPECT_EQ(c.is_default, c.label == design) << c.label;
    }
  }
  EXPECT_EQ(tune_candidates(ModelKind::fc3, "blas", 4, 64).size(), 4u);
  // LeNet-5's default stream on 2 cores is two copies of one micro-batch (docs/stream.md).
  for (const auto& c : tune_candidates(ModelKind::lenet5, "stream", 2, 64)) {
    if (c.is_default) {
      EXPECT_EQ(c.label, "s=2 c1k=1 c2c=1 f1=1 f2=1 f3=1 m=1 dynamic");
    }
  }
}

TEST(TuneCandidates, RefusesWhatItCannotTune) {
  EXPECT_THROW(tune_candidates(ModelKind::fc3, "serial", 2, 64), Error);
  EXPECT_THROW(tune_candidates(ModelKind::fc3, "stream", 0, 64), Error);
}

TEST(TunePlanner, ProfileBatchesCoverEveryWorkersShare) {
  std::vector<TuneCandidate> all = tune_candidates(ModelKind::lenet5, "stream", 2, 64);
  for (auto& c : tune_candidates(ModelKind::lenet5, "cluster", 2, 64)) all.push_back(c);
  EXPECT_EQ(tune_profile_batches(all, 64), (std::vector<int>{64, 32, 16, 8}));
}

TEST(TunePlanner, CheapFiringsAndFreeUpdatesMakeCopiesHalveTheStep) {
  // Nothing but work proportional to the samples: two copies split it exactly in half.
  TuneProfile p = linear_profile(ModelKind::lenet5, 2,
                                 {{"c1", 4e-6}, {"c2", 8e-6}, {"f1", 1e-6}, {"f2", 2e-7}, {"f3", 1e-7}, {"loss", 1e-7}},
                                 1e-7, 0);
  auto candidates = tune_candidates(ModelKind::lenet5, "stream", 2, 64);
  const TuneCandidate& best = best_of(candidates, p);
  EXPECT_NEAR(best.predicted_step_s, p.full_batch().step_s / 2, 1e-12);
  EXPECT_TRUE(best.label.starts_with("s=2")) << best.label;
}

TEST(TunePlanner, CostlyFiringsPickTheFewestFirings) {
  TuneProfile p = linear_profile(ModelKind::fc3, 2, {{"f1", 1e-6}, {"f2", 1e-7}, {"f3", 1e-8}, {"loss", 1e-8}},
                                 1e-8, 1e-6);
  p.stream_firing_s = 1e-3;  // a firing costs far more than the work
  auto candidates = tune_candidates(ModelKind::fc3, "stream", 2, 64);
  const TuneCandidate& best = best_of(candidates, p);
  // Two copies of one micro-batch: each core fires one copy's actors once per step.
  EXPECT_TRUE(best.label.starts_with("s=2 f1=1 f2=1 f3=1 m=1")) << best.label;
}

TEST(TunePlanner, ALargeUpdateKeepsFc3InOneCopyWithF1Split) {
  // FC-3's f1 is most of the work and of the parameters; copies would each sum and step their
  // share of the whole model, blocks of f1 step only their half.
  TuneProfile p = linear_profile(ModelKind::fc3, 2, {{"f1", 2e-6}, {"f2", 1e-7}, {"f3", 1e-8}, {"loss", 1e-8}},
                                 1e-8, 5e-4);
  p.stream_firing_s = 1e-7;
  auto candidates = tune_candidates(ModelKind::fc3, "stream", 2, 64);
  const TuneCandidate& best = best_of(candidates, p);
  EXPECT_TRUE(best.label.starts_with("s=1 f1=2")) << best.label;
}

TEST(TunePlanner, FiringAndFixedCostsComeBackFromTheTwoProfileRuns) {
  for (ModelKind model : {ModelKind::fc3, ModelKind::lenet5}) {
    TuneProfile p = linear_profile(model, 2,
                                   model == ModelKind::fc3
                                       ? std::map<std::string, double>{{"f1", 1e-6}, {"f2", 1e-7}, {"f3", 1e-8}, {"loss", 1e-8}}
                                       : std::map<std::string, double>{{"c1", 1e-6}, {"c2", 2e-6}, {"f1", 1e-7}, {"f2", 1e-8}, {"f3", 1e-8}, {"loss", 1e-8}},
                                   1e-8, 1e-5);
    p.stream_firing_s = 3e-6;
    p.stream_fixed_s = 40e-6;
    // Predict the profile runs' own graphs (every width 1 on one core, in 1 and 4 micro-batches),
    // then take both costs back from those two steps.
    const int m = stream_profile_microbatches(p.batch);
    EXPECT_EQ(m, 4);
    TuneCandidate one = stream_profile_graph(model, 1), four = stream_profile_graph(model, m);
    predict_step(p, one);
    predict_step(p, four);
    EXPECT_GT(four.predicted_step_s, one.predicted_step_s);  // more firings, the same samples
    const StreamCosts costs = stream_costs(p, one.predicted_step_s, m, four.predicted_step_s);
    EXPECT_NEAR(costs.firing_s, 3e-6, 1e-12);
    EXPECT_NEAR(costs.fixed_s, 40e-6, 1e-12);
    // Never negative: a faster second run than the first gives no firing cost.
    const StreamCosts none = stream_costs(p, one.predicted_step_s, m, one.predicted_step_s * 0.5);
    EXPECT_EQ(none.firing_s, 0.0);
    EXPECT_GE(none.fixed_s, 0.0);
    // One run only (an odd batch): all of its excess goes on the firings.
    EXPECT_EQ(stream_profile_microbatches(63), 1);
    p.stream_fixed_s = 0;
    predict_step(p, one);
    EXPECT_NEAR(stream_costs(p, one.predicted_step_s, 1, 0).firing_s, 3e-6, 1e-12);
  }
}

TEST(TunePlanner, ClusterThreadsHalveComputeButNotTheUpdate) {
  TuneProfile p = linear_profile(ModelKind::lenet5, 2, {{"c1", 1e-5}, {"c2", 1e-5}}, 0, 0);
  p.cluster_update_s = 0;
  auto candidates = tune_candidates(ModelKind::lenet5, "cluster", 2, 64);
  EXPECT_EQ(best_of(candidates, p).cores, 2);
  EXPECT_NEAR(best_of(candidates, p).predicted_step_s, p.full_batch().step_s / 2, 1e-12);
  // An update far above the compute: one thread moves 3n floats, replicas of two 4n, so one
  // thread wins; slices (2n per thread) beat both.
  p.cluster_update_s = 1.0;
  const TuneCandidate& best = best_of(candidates, p);
  EXPECT_EQ(best.cores, 2);
  EXPECT_EQ(best.options.at("node-update"), "slices");
  for (auto& c : candidates) {
    if (c.cores == 2 && !c.options.empty() && c.options.at("node-update") == "replicas") {
      EXPECT_GT(c.predicted_step_s, candidates.front().predicted_step_s);  // the one-thread point
    }
  }
}

TEST(TuneCandidates, OverHostsOnlyTheClusterWithOneDefault) {
  const auto one_thread = tune_candidates(ModelKind::lenet5, "cluster", 1, 64, 2);
  EXPECT_EQ(one_thread.size(), 8u);  // overlap on/off x balance static/dynamic x rank update
  const auto two_threads = tune_candidates(ModelKind::lenet5, "cluster", 2, 64, 2);
  EXPECT_EQ(two_threads.size(), 8u + 16u);  // and the node update for 2 threads
  for (const auto* space : {&one_thread, &two_threads}) {
    EXPECT_EQ(std::count_if(space->begin(), space->end(), [](const TuneCandidate& c) { return c.is_default; }), 1);
    for (const TuneCandidate& c : *space) {
      EXPECT_EQ(c.nodes, 2);
      if (c.is_default) {
        EXPECT_TRUE(c.options.empty()) << c.label;  // the sweep's own point
      }
    }
  }
  EXPECT_THROW(tune_candidates(ModelKind::lenet5, "stream", 1, 64, 2), Error);
  EXPECT_THROW(tune_candidates(ModelKind::lenet5, "cluster", 1, 64, 0), Error);
  EXPECT_EQ(worker_batch(64, 2, 1), 32);
  EXPECT_EQ(worker_batch(64, 2, 2), 16);
  EXPECT_EQ(worker_batch(64, 3, 1), 22);
  EXPECT_EQ(tune_profile_batches(two_threads, 64), (std::vector<int>{64, 32, 16}));
}

// Over 2 hosts, by hand: LeNet-5 at 32 samples a rank computes 1.0944 ms (c1 0.32, c2 0.64, f1
// 0.096, f2 0.032, f3 and loss 0.0032 each), backward two thirds of it. Its f1+f2+f3 allreduce
// (236,536 bytes) starts when backward has done f1 (0.0896 ms in) and hides behind c2 and c1;
// the c1+c2 one (10,288) follows it on the link. A link that costs bandwidth makes overlap win;
// one that costs latency only (2 alphas an allreduce) makes one allreduce beat two.
TEST(TunePlanner, OverHostsTheLinkPicksTheOverlap) {
  TuneProfile p = linear_profile(ModelKind::lenet5, 1,
                                 {{"c1", 1e-5}, {"c2", 2e-5}, {"f1", 3e-6}, {"f2", 1e-6}, {"f3", 1e-7}, {"loss", 1e-7}}, 0, 0);
  p.cluster_update_s = 0;
  p.nodes = 2;
  auto candidates = tune_candidates(ModelKind::lenet5, "cluster", 1, 64, 2);
  const auto step_of = [&](const std::string& overlap, const std::string& rank_update = "replicated") {
    for (TuneCandidate& c : candidates) {
      predict_step(p, c);
      const auto sharded = c.options.find("rank-update");
      const std::string update = sharded == c.options.end() ? "replicated" : sharded->second;
      if (!c.options.empty() && c.options.at("overlap") == overlap && c.options.at("balance") == "static" &&
          update == rank_update) {
        return c.predicted_step_s;
      }
    }
    return -1.0;
  };
  EXPECT_THROW(step_of("on"), Error) << "no link, no prediction over hosts";
  p.link = CollectiveCost{{0, 1e-8}, 0};
  EXPECT_NEAR(step_of("on"), 1.0944e-3 + (0.0896e-3 + 236536e-8 + 10288e-8 - 0.7296e-3), 1e-12);
  EXPECT_NEAR(step_of("off"), 1.0944e-3 + 246824e-8, 1e-12);
  const TuneCandidate& overlapped = best_of(candidates, p);
  EXPECT_TRUE(overlapped.options.empty() || overlapped.options.at("overlap") == "on") << overlapped.label;
  p.link = CollectiveCost{{1e-3, 0}, 0};
  EXPECT_NEAR(step_of("on"), 1.0944e-3 + (0.0896e-3 + 4e-3 - 0.7296e-3), 1e-12);
  EXPECT_NEAR(step_of("off"), 1.0944e-3 + 2e-3, 1e-12);
  EXPECT_EQ(best_of(candidates, p).options.at("overlap"), "off");
  // A tbf-capped link at the same 100 MB/s with a large bucket: what it saves while the step
  // computes goes out free. Without overlap the whole 1.0944 ms of compute saves 109,440 bytes of
  // the 246,824 sent; with it, the 0.3648 ms outside backward and the 0.0896 ms before f1's
  // allreduce save 45,440 of its 236,536, and the c1+c2 one follows with none. Either way the
  // step is the bytes at the rate, as the 1gbit hosts measured it.
  p.link = CollectiveCost{{0, 1e-8}, 0};
  p.token_bucket = TokenBucket{1e6, 1e8};
  EXPECT_NEAR(step_of("off"), 1.0944e-3 + (246824 - 109440) * 1e-8, 1e-12);
  EXPECT_NEAR(step_of("on"), 1.0944e-3 + (0.0896e-3 + (236536 - 45440) * 1e-8 + 10288e-8 - 0.7296e-3), 1e-12);
  EXPECT_NEAR(step_of("on"), step_of("off"), 1e-12);
  // A bucket of 10 kB caps what a step saves.
  p.token_bucket = TokenBucket{1e4, 1e8};
  EXPECT_NEAR(step_of("off"), 1.0944e-3 + (246824 - 1e4) * 1e-8, 1e-12);
  p.token_bucket.reset();
  // Two hosts on one core: each rank computes at half speed, and so does backward.
  p.machine_cores = 1;
  EXPECT_NEAR(step_of("on"), 2.1888e-3 + (0.1792e-3 + 236536e-8 + 10288e-8 - 1.4592e-3), 1e-12);
  p.machine_cores = 0;
  // Sharded: each allreduce's reduce-scatter (half the ring) in its place, then after backward
  // and the rank's half of the update the two allgathers (the other half), all exposed. Where
  // every allreduce ends past backward anyway, the two designs take the same time on the link.
  EXPECT_NEAR(step_of("on", "sharded"), step_of("on"), 1e-12);
  p.link = CollectiveCost{{1e-3, 0}, 0};
  EXPECT_NEAR(step_of("on", "sharded"), 1.0944e-3 + (0.0896e-3 + 2e-3 - 0.7296e-3) + 2e-3, 1e-12);
  // A fast link: the large replicated allreduce hides behind backward (the c1+c2 one starts as
  // backward ends), the sharded allgathers cannot; the update decides. The rank's step updates in
  // 0.1 ms; sharded, each rank its half.
  p.link = CollectiveCost{{0, 1e-10}, 0};
  EXPECT_NEAR(step_of("on"), 1.0944e-3 + 10288e-10, 1e-12);
  EXPECT_NEAR(step_of("on", "sharded"), 1.0944e-3 + 0.5 * 10288e-10 + 0.5 * 246824e-10, 1e-12);
  EXPECT_EQ(best_of(candidates, p).label.find("sharded"), std::string::npos);
  p.cluster_update_s = 1e-4;
  EXPECT_NEAR(step_of("on"), 1.0944e-3 + 10288e-10 + 1e-4, 1e-12);
  EXPECT_NEAR(step_of("on", "sharded"), 1.0944e-3 + 0.5 * 10288e-10 + 0.5e-4 + 0.5 * 246824e-10, 1e-12);
  EXPECT_NE(best_of(candidates, p).label.find("sharded"), std::string::npos);
}

TEST(TunePlanner, CrossCoreCostComesBackFromTheProfileRunAndFallsOnTheClustersThreads) {
  TuneProfile p = linear_profile(ModelKind::fc3, 2, {{"f1", 1e-6}, {"f2", 1e-7}, {"f3", 1e-8}, {"loss", 1e-8}},
                                 1e-8, 1e-5);
  p.cluster_update_s = 1e-5;
  p.cluster_fixed_s = 2e-6;
  auto cluster = tune_candidates(ModelKind::fc3, "cluster", 2, 64);
  auto stream = tune_candidates(ModelKind::fc3, "stream", 2, 64);
  std::vector<double> before;
  for (auto* list : {&cluster, &stream}) {
    for (TuneCandidate& c : *list) {
      predict_step(p, c);
      before.push_back(c.predicted_step_s);
    }
  }
  // The default on both cores measured 50 us above its prediction: two threads cross the whole
  // parameter set once (each sums half of the other's gradient and reads back half the weights).
  // The stream's copies are left to their update's model.
  const auto is_default = [](const TuneCandidate& c) { return c.is_default; };
  const TuneCandidate profiled = *std::find_if(cluster.begin(), cluster.end(), is_default);
  p.cross_core_s = cross_core_seconds(p, profiled.predicted_step_s + 50e-6);
  EXPECT_NEAR(p.cross_core_s, 50e-6, 1e-12);
  std::size_t k = 0;
  for (auto* list : {&cluster, &stream}) {
    for (TuneCandidate& c : *list) {
      predict_step(p, c);
      const bool shares = c.strategy == "cluster" && c.cores > 1;
      EXPECT_NEAR(c.predicted_step_s - before[k++], shares ? 50e-6 : 0.0, 1e-12) << c.label;
    }
  }
  EXPECT_EQ(cross_core_seconds(p, 0.0), 0.0);  // never negative
  p.cores = 1;
  EXPECT_EQ(cross_core_seconds(p, 1.0), 0.0);  // one core crosses nothing
}

// The winner is the default unless a candidate beat it in every repetition: a higher median with
// a repetition below the default's median is luck, not a winner.
TEST(TuneWinners, TheDefaultUnlessACandidateBeatItInEveryRepetition) {
  const auto entry = [](const char* id, bool is_default, double speedup, double low, double high) {
    return nlohmann::json{{"id", id}, {"strategy", "stream"}, {"status", "ok"}, {"label", id},
                          {"options", nlohmann::json::object()}, {"cores", 2}, {"nodes", 1},
                          {"default", is_default}, {"speedup", speedup},
                          {"speedup_range", {low, high}}, {"measured_step_s", 1e-3}, {"command", {"cnnbench"}}};
  };
  nlohmann::json measured = {entry("default", true, 1.50, 1.45, 1.55), entry("lucky", false, 1.70, 1.40, 1.90),
                             entry("steady", false, 1.60, 1.52, 1.65), entry("steadier", false, 1.58, 1.56, 1.60)};
  nlohmann::json winners = tune_winners(measured, {"stream", "cluster"});
  EXPECT_EQ(winners.at("stream").at("id"), "steady");  // the higher median of the two that clear
  EXPECT_EQ(winners.at("stream").at("default_speedup"), 1.50);
  EXPECT_TRUE(winners.at("cluster").is_null());
  EXPECT_EQ(winners.at("stream").at("cores"), 2);  // where sweep --tuned runs it
  EXPECT_EQ(winners.at("stream").at("nodes"), 1);
  measured.erase(2);  // without "steady"
  EXPECT_EQ(tune_winners(measured, {"stream"}).at("stream").at("id"), "steadier");
  measured.erase(2);  // only the lucky one beside the default
  EXPECT_EQ(tune_winners(measured, {"stream"}).at("stream").at("id"), "default");
  measured[0]["status"] = "failed";  // no default measured: the highest median
  EXPECT_EQ(tune_winners(measured, {"stream"}).at("stream").at("id"), "lucky");
}

// Where the candidates ran in the same rounds as the default, a candidate wins by being faster
// in each of them: a drift of the machine moves both alike. A gain of 3% under a drift of 6%
// (every range overlapping the default's median) wins; one round lost, or too few rounds to
// judge by, falls back on the ranges.
TEST(TuneWinners, FasterInEveryRoundBeatsTheDefaultUnderDrift) {
  const auto entry = [](const char* id, bool is_default, std::vector<double> by_round) {
    nlohmann::json rounds = nlohmann::json::object();
    for (std::size_t r = 0; r < by_round.size(); ++r) rounds[std::to_string(r)] = by_round[r];
    std::vector<double> sorted = by_round;
    std::sort(sorted.begin(), sorted.end());
    return nlohmann::json{{"id", id}, {"strategy", "cluster"}, {"status", "ok"}, {"label", id},
                          {"options", nlohmann::json::object()}, {"cores", 2}, {"nodes", 1},
                          {"default", is_default}, {"speedup", sorted[sorted.size() / 2]},
                          {"speedup_range", {sorted.front(), sorted.back()}}, {"speedup_by_round", rounds},
                          {"measured_step_s", 1e-3}, {"command", {"cnnbench"}}};
  };
  const std::vector<double> drift = {1.80, 1.86, 1.90, 1.84, 1.88};
  std::vector<double> gain, one_lost;
  for (double d : drift) gain.push_back(d * 1.03);
  one_lost = gain;
  one_lost[2] = drift[2] * 0.99;
  nlohmann::json measured = {entry("default", true, drift), entry("slices", false, gain)};
  EXPECT_EQ(tune_winners(measured, {"cluster"}).at("cluster").at("id"), "slices");
  measured[1] = entry("slices", false, one_lost);
  EXPECT_EQ(tune_winners(measured, {"cluster"}).at("cluster").at("id"), "default");
  // Three rounds are too few to judge round by round; the ranges overlap: the default stays.
  measured = {entry("default", true, {1.80, 1.86, 1.90}), entry("slices", false, {1.854, 1.916, 1.957})};
  EXPECT_EQ(tune_winners(measured, {"cluster"}).at("cluster").at("id"), "default");
}

TEST(TunePlanner, BlasMatchesItsProfiledEnds) {
  TuneProfile p = linear_profile(ModelKind::fc3, 4, {{"f1", 1e-6}}, 0, 0);
  p.blas_step_1_s = 4e-3;
  p.blas_step_p_s = 1e-3;
  auto candidates = tune_candidates(ModelKind::fc3, "blas", 4, 64);
  for (auto& c : candidates) predict_step(p, c);
  EXPECT_DOUBLE_EQ(candidates[0].predicted_step_s, 4e-3);
  EXPECT_DOUBLE_EQ(candidates[3].predicted_step_s, 1e-3);
  EXPECT_GT(candidates[1].predicted_step_s, candidates[2].predicted_step_s);
}

TEST(TunePlanner, MeasuresDefaultsAndBestsThenWhatTheBudgetAllows) {
  std::vector<TuneCandidate> candidates;
  for (int k = 0; k < 4; ++k) {
    for (const char* strategy : {"stream", "blas"}) {
      TuneCandidate c;
      c.strategy = strategy;
      c.predicted_step_s = 1.0 + k;
      c.is_default = k == 3;
      c.label = std::string(strategy) + std::to_string(k);
      candidates.push_back(c);
    }
  }
  const auto one_second = [](const TuneCandidate&) { return 1.0; };
  // No budget: each strategy's default and its predicted best, nothing more.
  auto chosen = choose_measured(candidates, one_second, 0);
  ASSERT_EQ(chosen.size(), 4u);
  // Two seconds more: the next best of each strategy.
  chosen = choose_measured(candidates, one_second, 6);
  ASSERT_EQ(chosen.size(), 6u);
  EXPECT_EQ(candidates[chosen[4]].label, "blas1");
  EXPECT_EQ(candidates[chosen[5]].label, "stream1");
  EXPECT_EQ(choose_measured(candidates, one_second, 100).size(), candidates.size());
}

}  // namespace
}  // namespace cnnbench
