// The cluster strategy on ranks simulated in one process (simulated_ranks.hpp), no mpirun: 2 and
// 3 ranks x 1 or 2 threads and one rank x 1..16 threads (oversubscribed on a small machine) equal
// a naive serial loop and hold the same bits on every rank, replicas and slices of the node's
// update give the same bits, the reduction's bytes per thread do not grow with the threads, the
// overlapped exchange starts every bucket once, last layer first, and gives the bits of the
// blocking one, a stop on any rank stops all, and a rank that throws ends every rank. Also how
// the batch is cut over ranks and threads, and how balancing moves the cut.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "../lib/strategies/cluster/cluster_shares.hpp"
#include "../lib/strategies/cluster/cluster_strategy.hpp"
#include "../lib/strategies/cluster/gradient_exchange.hpp"
#include "../lib/strategies/cluster/node_update.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"
#include "cnnbench/layers.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/train.hpp"
#include "serial_oracle.hpp"
#include "simulated_ranks.hpp"
#include "tensor_compare.hpp"
#include "thread_counts.hpp"

namespace cnnbench {
namespace {

using testing::GroupCall;
using testing::SimulatedJob;
using testing::SimulatedRank;

struct Shape {
  std::string model = "fc3";
  int ranks = 2, threads = 1, batch = 32, steps = 8;
  bool pin = false;  // the simulated ranks share this machine's cores
  std::map<std::string, std::string> options;

  testing::SerialRun serial() const {
    testing::SerialRun run;
    run.model = model;
    run.batch = batch;
    run.steps = steps;
    run.dataset_size = 256;
    return run;
  }
};

std::string describe(const Shape& s) {
  std::string text = s.model + " " + std::to_string(s.ranks) + " ranks x " +
                     std::to_string(s.threads) + " threads";
  for (const auto& [key, value] : s.options) text += " --" + key + " " + value;
  return text;
}

// A simulated rank's run: the oracle's record, and what the rank asked of its group.
struct Trained : testing::Trained {
  std::vector<GroupCall> calls;
  nlohmann::json metrics;
};

// Where a run starts: the initial weights before step 0, or a state (weights and momentum, as a
// checkpoint holds them) before step `step`.
struct Start {
  const testing::ModelState* state = nullptr;
  std::int64_t step = 0;
};

// Every simulated rank trains the shape; `on_step(rank, step)` runs in each rank's callback.
std::vector<Trained> train_on_simulated_ranks(
    const Shape& s, const std::function<void(int rank, std::int64_t step)>& on_step = {},
    Start start = {}) {
  testing::SerialRun run = s.serial();
  run.steps = static_cast<int>(start.step) + s.steps;
  const ModelKind kind = parse_model(s.model);
  const Dataset data = make_synthetic(run.dataset_size, run.data_seed);
  const auto order = testing::step_order(run);
  TrainConfig config;
  config.model = kind;
  config.strategy = "cluster";
  config.batch = s.batch;
  config.threads = s.threads;
  config.pin = s.pin;
  config.options = s.options;
  SimulatedJob job(s.ranks);
  std::vector<Trained> results(static_cast<std::size_t>(s.ranks));
  testing::run_simulated_ranks(job, [&](int rank, std::unique_ptr<SimulatedRank> group) {
    SimulatedRank& calls = *group;
    Model model(kind);
    if (start.state) {
      model = testing::model_from(kind, *start.state);
    } else {
      init_params(model.params, kind, run.init_seed);
    }
    auto strategy = make_cluster_strategy(std::move(group));
    strategy->prepare(model, data, config);
    Trained& result = results[static_cast<std::size_t>(rank)];
    const auto record = [&](std::int64_t step, double loss) {
      if (on_step) on_step(rank, step);
      result.losses.push_back(loss);
    };
    if (start.state) {
      strategy->run_steps({order.data(), start.step, s.steps, start.step}, record);
    } else {  // two ranges, as the driver makes them at epoch ends
      const std::int64_t first_range = s.steps / 3;
      strategy->run_steps({order.data(), 0, first_range, 0}, record);
      strategy->run_steps({order.data(), first_range, s.steps - first_range, first_range}, record);
    }
    strategy->sync_to(model);
    result.params.assign(model.params.begin(), model.params.end());
    result.momentum.assign(model.momentum.begin(), model.momentum.end());
    result.calls = calls.calls();
    result.metrics = strategy->metrics();
  });
  return results;
}

// The ranks' loss curve equals serial's, and one more step from the ranks' weights and momentum
// equals the oracle's step from there (equivalence.hpp); every rank holds the same bits.
void expect_ranks_match_serial(const Shape& s) {
  const testing::Trained serial = testing::train_serially(s.serial());
  const std::vector<Trained> ranks = train_on_simulated_ranks(s);
  const ModelKind kind = parse_model(s.model);
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const std::string what = describe(s) + ", rank " + std::to_string(r);
    // The sums have the same bits on every rank, so the ranks take the same steps.
    EXPECT_EQ(ranks[r].params, ranks[0].params) << what << " differs from rank 0";
    EXPECT_EQ(ranks[r].momentum, ranks[0].momentum) << what << " differs from rank 0";
    EXPECT_EQ(ranks[r].losses, ranks[0].losses) << what << " differs from rank 0";
  }
  testing::expect_loss_curves_close(ranks[0].losses, serial.losses, describe(s));
  Shape one_step = s;
  one_step.steps = 1;
  const testing::ModelState reached{ranks[0].params, ranks[0].momentum};
  const std::vector<Trained> stepped = train_on_simulated_ranks(one_step, {}, {&reached, s.steps});
  const testing::ModelState want = testing::serial_step_after(s.serial(), reached);
  testing::expect_one_step_close({stepped[0].params, stepped[0].momentum}, want, kind, describe(s));
  for (std::size_t r = 1; r < stepped.size(); ++r) {
    EXPECT_TRUE(stepped[r].params == stepped[0].params && stepped[r].momentum == stepped[0].momentum)
        << describe(s) << ": after one step from the same state rank " << r << " differs from rank 0";
  }
}

TEST(ClusterOnSimulatedRanks, EveryShapeMatchesSerial) {
  for (const std::string overlap : {"on", "off"}) {
    for (const auto& [ranks, threads] : std::vector<std::pair<int, int>>{{2, 1}, {2, 2}, {3, 1}}) {
      Shape s;
      s.ranks = ranks;
      s.threads = threads;
      s.options = {{"overlap", overlap}};
      expect_ranks_match_serial(s);
    }
  }
}

TEST(ClusterOnSimulatedRanks, Lenet5MatchesSerial) {
  for (const std::string overlap : {"on", "off"}) {
    Shape s;
    s.model = "lenet5";
    s.ranks = 2;
    s.threads = 2;
    s.steps = 4;
    s.options = {{"overlap", overlap}};
    expect_ranks_match_serial(s);
  }
}

TEST(ClusterOnSimulatedRanks, DynamicBalanceKeepsTheSumAndMatchesSerial) {
  Shape s;
  s.ranks = 2;
  s.threads = 2;
  s.options = {{"balance", "dynamic"}};
  expect_ranks_match_serial(s);
}

// FC-3's backward runs whole between its callbacks, so the overlapped exchange adds the same
// numbers in the same order as the blocking one: a bucket summed before every thread had
// finished it, or started twice, would change the bits.
TEST(ClusterOnSimulatedRanks, OverlapGivesTheBitsOfTheBlockingSum) {
  Shape on, off;
  on.ranks = off.ranks = 2;
  on.threads = off.threads = 2;
  on.options = {{"overlap", "on"}};
  off.options = {{"overlap", "off"}};
  const auto overlapped = train_on_simulated_ranks(on);
  const auto blocking = train_on_simulated_ranks(off);
  for (std::size_t r = 0; r < overlapped.size(); ++r) {
    EXPECT_EQ(overlapped[r].params, blocking[r].params) << "rank " << r;
    EXPECT_EQ(overlapped[r].momentum, blocking[r].momentum) << "rank " << r;
    EXPECT_EQ(overlapped[r].losses, blocking[r].losses) << "rank " << r;
  }
}

// The calls of one step that sum gradients or the step's loss and times.
// (The metrics' table, summed at range ends, is left out: it is not 3 doubles on 2 ranks.)
std::vector<std::vector<GroupCall>> sums_by_step(const std::vector<GroupCall>& calls) {
  std::vector<std::vector<GroupCall>> steps(1);
  for (const GroupCall& call : calls) {
    if (call.what == "sum" && call.is_double && call.count != 3) continue;  // metrics table
    steps.back().push_back(call);
    const bool ends_step = call.what == "wait_for_sums" || (call.what == "sum" && call.is_double);
    if (ends_step) steps.emplace_back();
  }
  steps.pop_back();
  return steps;
}

TEST(ClusterOnSimulatedRanks, OverlapStartsEveryBucketOnceLastLayerFirst) {
  for (const std::string model : {"fc3", "lenet5"}) {
    Shape s;
    s.model = model;
    s.ranks = 2;
    s.threads = 2;
    s.steps = 3;
    s.options = {{"overlap", "on"}, {"rank-update", "replicated"}};
    const auto ranks = train_on_simulated_ranks(s);
    const ModelSpec& spec = model_spec(parse_model(model));
    const auto buckets = gradient_buckets(spec, gradient_bucket_bytes);
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      const auto steps = sums_by_step(ranks[r].calls);
      ASSERT_EQ(steps.size(), static_cast<std::size_t>(s.steps)) << model << " rank " << r;
      for (const auto& step : steps) {
        // Buckets last to first, then the loss and times (ranks + 1 doubles), then one wait.
        ASSERT_EQ(step.size(), buckets.size() + 2) << model << " rank " << r;
        const float* base = static_cast<const float*>(step[0].data) - buckets.back().begin;
        for (std::size_t k = 0; k < buckets.size(); ++k) {
          const GradientBucket& bucket = buckets[buckets.size() - 1 - k];
          EXPECT_EQ(step[k].what, "start_sum");
          EXPECT_FALSE(step[k].is_double);
          EXPECT_EQ(step[k].count, bucket.end - bucket.begin) << bucket.name;
          EXPECT_EQ(step[k].data, base + bucket.begin) << bucket.name;
        }
        EXPECT_EQ(step[buckets.size()].what, "start_sum");
        EXPECT_TRUE(step[buckets.size()].is_double);
        EXPECT_EQ(step[buckets.size()].count, 3u);
        EXPECT_EQ(step.back().what, "wait_for_sums");
        EXPECT_EQ(step.back().count, buckets.size() + 1);
      }
    }
  }
}

TEST(ClusterOnSimulatedRanks, WithoutOverlapOneBlockingSumOfTheWholeGradient) {
  Shape s;
  s.ranks = 2;
  s.threads = 2;
  s.steps = 3;
  s.options = {{"overlap", "off"}, {"rank-update", "replicated"}};
  const auto ranks = train_on_simulated_ranks(s);
  const std::size_t parameters = model_spec(ModelKind::fc3).param_count;
  for (const Trained& rank : ranks) {
    const auto steps = sums_by_step(rank.calls);
    ASSERT_EQ(steps.size(), 3u);
    for (const auto& step : steps) {
      ASSERT_EQ(step.size(), 2u);
      EXPECT_EQ(step[0].what, "sum");
      EXPECT_FALSE(step[0].is_double);
      EXPECT_EQ(step[0].count, parameters);
      EXPECT_EQ(step[1].what, "sum");
      EXPECT_TRUE(step[1].is_double);
    }
  }
}

// Each rank sums and steps only its own segment of every bucket, then the ranks share the new
// weights: the same float operations on every element as the replicated update, so the same bits,
// with and without overlap, on 2 and 3 ranks, with each node design.
TEST(ClusterOnSimulatedRanks, ShardedUpdateGivesTheBitsOfTheReplicatedOne) {
  struct Case {
    std::string model;
    int ranks, threads;
    std::string overlap, node_update;
  };
  for (const Case& c : std::vector<Case>{{"fc3", 2, 1, "on", "auto"},
                                         {"fc3", 3, 1, "off", "auto"},
                                         {"fc3", 2, 2, "on", "replicas"},
                                         {"fc3", 2, 2, "off", "slices"},
                                         {"lenet5", 3, 2, "on", "replicas"}}) {
    Shape sharded, replicated;
    sharded.model = replicated.model = c.model;
    sharded.ranks = replicated.ranks = c.ranks;
    sharded.threads = replicated.threads = c.threads;
    sharded.steps = replicated.steps = 4;
    sharded.options = {{"overlap", c.overlap}, {"node-update", c.node_update},
                       {"rank-update", "sharded"}};
    replicated.options = sharded.options;
    replicated.options["rank-update"] = "replicated";
    const auto a = train_on_simulated_ranks(sharded);
    const auto b = train_on_simulated_ranks(replicated);
    const std::string what = describe(sharded);
    for (std::size_t r = 0; r < a.size(); ++r) {
      EXPECT_EQ(a[r].params, b[r].params) << what << ", rank " << r;
      EXPECT_EQ(a[r].momentum, b[r].momentum) << what << ", rank " << r;
      EXPECT_EQ(a[r].losses, b[r].losses) << what << ", rank " << r;
      EXPECT_EQ(a[r].metrics["rank-update"], "sharded") << what;
      EXPECT_EQ(b[r].metrics["rank-update"], "replicated") << what;
    }
  }
}

// Sharded, a step asks the ranks for each bucket's own segment (last bucket first, as the
// replicated sums), the loss and times, one wait; then a share of each bucket's stepped
// segments and a second wait.
TEST(ClusterOnSimulatedRanks, ShardedStepSumsOwnSegmentsThenSharesThem) {
  for (const std::string overlap : {"on", "off"}) {
    Shape s;
    s.ranks = 3;
    s.threads = 2;
    s.steps = 2;
    s.options = {{"overlap", overlap}, {"rank-update", "sharded"}};
    const auto ranks = train_on_simulated_ranks(s);
    const auto buckets = gradient_buckets(model_spec(ModelKind::fc3), gradient_bucket_bytes);
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      std::vector<std::string> calls;
      for (const GroupCall& call : ranks[r].calls) {
        if (call.what == "sum" && call.is_double && call.count != 4) continue;  // metrics table
        std::string line = call.what + " " + std::to_string(call.count);
        if (call.what == "sum" || call.what == "start_sum") line += call.is_double ? " d" : " f";
        calls.push_back(line);
      }
      std::vector<std::string> step;
      for (std::size_t k = buckets.size(); k-- > 0;) {
        step.push_back("start_sum_of_own_segment " + std::to_string(buckets[k].end - buckets[k].begin));
      }
      // Without overlap the loss and times are a blocking sum after the wait for the segments.
      if (overlap == "on") step.push_back("start_sum 4 d");
      step.push_back("wait_for_sums " + std::to_string(buckets.size() + (overlap == "on" ? 1 : 0)));
      if (overlap == "off") step.push_back("sum 4 d");
      for (const GradientBucket& bucket : buckets) {
        step.push_back("start_share_segments " + std::to_string(bucket.end - bucket.begin));
      }
      step.push_back("wait_for_sums " + std::to_string(buckets.size()));
      std::vector<std::string> want;
      for (int k = 0; k < s.steps; ++k) want.insert(want.end(), step.begin(), step.end());
      // sync_to shares the momentum's segments once more.
      for (const GradientBucket& bucket : buckets) {
        want.push_back("start_share_segments " + std::to_string(bucket.end - bucket.begin));
      }
      want.push_back("wait_for_sums " + std::to_string(buckets.size()));
      EXPECT_EQ(calls, want) << "overlap " << overlap << ", rank " << r;
    }
  }
}

TEST(GradientBuckets, LayersMergeFromTheLastOneBackIntoBucketsOfAtLeast64KB) {
  const auto names = [](ModelKind kind) {
    std::vector<std::string> out;
    for (const auto& bucket : gradient_buckets(model_spec(kind), gradient_bucket_bytes)) {
      out.push_back(bucket.name);
    }
    return out;
  };
  EXPECT_EQ(names(ModelKind::lenet5), (std::vector<std::string>{"c1+c2", "f1+f2+f3"}));
  EXPECT_EQ(names(ModelKind::fc3), (std::vector<std::string>{"f1", "f2+f3"}));
  for (const ModelKind kind : {ModelKind::lenet5, ModelKind::fc3}) {
    const ModelSpec& spec = model_spec(kind);
    const auto buckets = gradient_buckets(spec, gradient_bucket_bytes);
    std::size_t next = 0;
    int next_tensor = 0;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      EXPECT_EQ(buckets[b].begin, next);
      EXPECT_EQ(buckets[b].first_tensor, next_tensor);
      if (b > 0) {
        EXPECT_GE((buckets[b].end - buckets[b].begin) * sizeof(float), gradient_bucket_bytes);
      }
      next = buckets[b].end;
      next_tensor = buckets[b].last_tensor + 1;
    }
    EXPECT_EQ(next, spec.param_count);
    EXPECT_EQ(next_tensor, static_cast<int>(spec.tensors.size()));
  }
  // Every layer its own bucket when any size will do.
  EXPECT_EQ(gradient_buckets(model_spec(ModelKind::fc3), 1).size(), 3u);
}

TEST(ClusterOnSimulatedRanks, AStopOnAnyRankStopsEveryRank) {
  SimulatedJob job(3);
  std::vector<char> stopped(3), kept_on(3);
  testing::run_simulated_ranks(job, [&](int rank, std::unique_ptr<SimulatedRank> group) {
    auto strategy = make_cluster_strategy(std::move(group));
    stopped[static_cast<std::size_t>(rank)] = strategy->agree_to_stop(rank == 1);
    kept_on[static_cast<std::size_t>(rank)] = !strategy->agree_to_stop(false);
  });
  EXPECT_EQ(stopped, (std::vector<char>{1, 1, 1}));
  EXPECT_EQ(kept_on, (std::vector<char>{1, 1, 1}));
}

TEST(ClusterOnSimulatedRanks, ARankThatThrowsEndsEveryRank) {
  Shape s;
  s.ranks = 3;
  s.steps = 6;
  std::vector<std::atomic<int>> steps_seen(3);
  // Returning at all is the point: ranks 0 and 2 must not wait forever in the next collective.
  try {
    train_on_simulated_ranks(s, [&](int rank, std::int64_t) {
      if (++steps_seen[static_cast<std::size_t>(rank)] == 3 && rank == 1) {
        throw Error("injected failure");
      }
    });
    ADD_FAILURE() << "the job went on after a rank threw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fail"), std::string::npos) << e.what();
  }
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_LT(steps_seen[static_cast<std::size_t>(rank)].load(), s.steps) << "rank " << rank;
  }
}

TEST(ClusterOnSimulatedRanks, ReportCountsEveryRanksSamples) {
  Shape s;
  s.ranks = 3;
  s.threads = 2;
  s.batch = 31;  // shares of 11, 10, 10 over the ranks; 6 + 5, 5 + 5 over their threads
  const auto ranks = train_on_simulated_ranks(s);
  const nlohmann::json& metrics = ranks[0].metrics;
  EXPECT_EQ(metrics["ranks"], 3);
  EXPECT_EQ(metrics["threads_per_rank"], 2);
  EXPECT_EQ(metrics["steps"], s.steps);
  ASSERT_EQ(metrics["per_rank"].size(), 3u);
  double samples = 0;
  for (const auto& rank : metrics["per_rank"]) samples += rank["samples"].get<double>();
  EXPECT_EQ(samples, static_cast<double>(s.steps) * s.batch);
  EXPECT_EQ(metrics["per_rank"][0]["last_thread_shares"], (std::vector<int>{6, 5}));
  EXPECT_EQ(metrics["per_rank"][1]["last_thread_shares"], (std::vector<int>{5, 5}));
  EXPECT_EQ(metrics["per_rank"][2]["last_share"], 10);
  // The simulated ranks share this process's host: shared memory, one host named per rank.
  const nlohmann::json& network = metrics["network"];
  EXPECT_EQ(network["transport"], "shm") << network;
  ASSERT_EQ(network["rank_hosts"].size(), 3u) << network;
  EXPECT_EQ(network["hosts"], nlohmann::json::array({network["rank_hosts"][0]})) << network;
  EXPECT_EQ(metrics["per_rank"][2]["host"], network["rank_hosts"][2]);
  for (const Trained& rank : ranks) EXPECT_EQ(rank.metrics, metrics);
}

// --shard-data on simulated ranks: rank r holds only block r of the data set, so every sample a
// batch gives it must come from there (gather_batch refuses any other), with rank-level balancing
// off; the model equals one rank's on the whole set with the same sharded order.
TEST(ClusterOnSimulatedRanks, ShardDataRanksTrainOnTheirOwnBlocks) {
  constexpr std::size_t samples = 301;
  constexpr int batch = 31, steps = 8;
  const auto order = sharded_epoch_order(samples, 3, batch, 5, 0, true);
  ASSERT_GE(order.size(), static_cast<std::size_t>(steps * batch));
  const auto train = [&](int ranks, bool shard_data) {
    TrainConfig config;
    config.model = ModelKind::fc3;
    config.strategy = "cluster";
    config.batch = batch;
    config.threads = 2;
    config.pin = false;
    config.shards = 3;
    config.shard_data = shard_data;
    config.options = {{"balance", "dynamic"}};
    SimulatedJob job(ranks);
    std::vector<std::vector<float>> params(static_cast<std::size_t>(ranks));
    testing::run_simulated_ranks(job, [&](int rank, std::unique_ptr<SimulatedRank> group) {
      const Dataset data = shard_data ? make_synthetic_block(samples, 3, ranks, rank)
                                      : make_synthetic(samples, 3);
      Model model(ModelKind::fc3);
      init_params(model.params, ModelKind::fc3, 11);
      auto strategy = make_cluster_strategy(std::move(group));
      strategy->prepare(model, data, config);
      strategy->run_steps({order.data(), 0, steps, 0}, [](std::int64_t, double) {});
      strategy->sync_to(model);
      params[static_cast<std::size_t>(rank)].assign(model.params.begin(), model.params.end());
    });
    return params;
  };
  const auto whole = train(1, false);
  const auto blocks = train(3, true);
  for (std::size_t r = 0; r < blocks.size(); ++r) {
    expect_tensors_close(blocks[r], whole[0], ModelKind::fc3, 1e-4,
                         "--shard-data rank " + std::to_string(r));
  }
}

TEST(ClusterOnSimulatedRanks, ShardDataRefusesAnotherRanksBlock) {
  TrainConfig config;
  config.model = ModelKind::fc3;
  config.strategy = "cluster";
  config.pin = false;
  config.shards = 2;
  config.shard_data = true;
  SimulatedJob job(2);
  std::vector<std::string> errors(2);
  try {
    testing::run_simulated_ranks(job, [&](int rank, std::unique_ptr<SimulatedRank> group) {
      const Dataset swapped = make_synthetic_block(200, 3, 2, 1 - rank);
      auto strategy = make_cluster_strategy(std::move(group));
      try {
        strategy->prepare(Model(ModelKind::fc3), swapped, config);
      } catch (const Error& e) {
        errors[static_cast<std::size_t>(rank)] = e.what();
        throw;
      }
    });
    ADD_FAILURE() << "ranks holding each other's blocks were accepted";
  } catch (const Error&) {
  }
  EXPECT_NE(errors[0].find("rank 0 holds samples [100, 200) but its block is [0, 100)"),
            std::string::npos) << errors[0];
}

TEST(ClusterCut, EvenSharesOverRanksThenThreads) {
  // 31 samples over 3 ranks (11, 10, 10), each share over 2 threads.
  const std::vector<std::vector<int>> threads = {{6, 5}, {5, 5}, {5, 5}};
  const std::vector<int> offsets = {0, 11, 21};
  for (int rank = 0; rank < 3; ++rank) {
    ClusterShares shares(31, 3, rank, 2, false);
    EXPECT_EQ(shares.last_thread_shares(), (std::vector<int>{0, 0})) << "before any step";
    const StepShares step = shares.next_step();
    const auto r = static_cast<std::size_t>(rank);
    EXPECT_EQ(step.rank_offset, offsets[r]);
    EXPECT_EQ(step.thread_shares, threads[r]);
    EXPECT_EQ(step.thread_offsets, (std::vector<int>{offsets[r], offsets[r] + threads[r][0]}));
    EXPECT_EQ(shares.last_thread_shares(), threads[r]);
    EXPECT_EQ(shares.max_thread_share(), 16);
  }
  EXPECT_EQ(ClusterShares(64, 1, 0, 2, true).max_thread_share(), 64);  // twice the even 32
  EXPECT_EQ(ClusterShares(64, 1, 0, 3, true).max_thread_share(), 44);
  EXPECT_THROW(ClusterShares(64, 2, 2, 1, false), Error);
}

TEST(ClusterCut, BalancingMovesSamplesOffTheSlowerPartAndKeepsTheBatch) {
  // Two ranks, each with its own view, see the same times and agree on the new cut.
  ClusterShares rank0(64, 2, 0, 2, true), rank1(64, 2, 1, 2, true);
  rank0.next_step();
  rank1.next_step();
  rank0.balance_ranks({1.0, 3.0});  // rank 1 took three times as long
  rank1.balance_ranks({1.0, 3.0});
  const StepShares first = rank0.next_step(), second = rank1.next_step();
  EXPECT_GT(first.rank_share, 32);
  EXPECT_EQ(first.rank_share + second.rank_share, 64);
  EXPECT_EQ(second.rank_offset, first.rank_share);

  // Inside rank 0: thread 0 twice as slow gives samples to thread 1.
  ClusterShares threads(64, 1, 0, 2, true);
  const StepShares even = threads.next_step();
  EXPECT_EQ(even.thread_shares, (std::vector<int>{32, 32}));
  threads.balance_threads({2.0, 1.0});
  const StepShares moved = threads.next_step();
  EXPECT_LT(moved.thread_shares[0], 32);
  EXPECT_EQ(moved.thread_shares[0] + moved.thread_shares[1], 64);
  EXPECT_EQ(moved.thread_offsets[1], moved.thread_shares[0]);
  // Times within 5% of each other leave the cut as it is.
  threads.balance_threads({1.0, 1.04});
  EXPECT_EQ(threads.next_step().thread_shares, moved.thread_shares);
}

TEST(ClusterCut, ThreadsKeepTheirProportionsWhenTheRanksShareChanges) {
  ClusterShares rank0(64, 2, 0, 2, true);
  EXPECT_EQ(rank0.next_step().thread_shares, (std::vector<int>{16, 16}));
  rank0.balance_threads({3.0, 1.0});
  const std::vector<int> moved = rank0.next_step().thread_shares;
  EXPECT_LT(moved[0], moved[1]);
  rank0.balance_ranks({1.0, 2.0});  // rank 0 grows
  const StepShares grown = rank0.next_step();
  ASSERT_GT(grown.rank_share, 32);
  EXPECT_EQ(grown.thread_shares[0] + grown.thread_shares[1], grown.rank_share);
  EXPECT_LT(grown.thread_shares[0], grown.thread_shares[1]);
}

// One rank, 1..16 threads, on however few cores: the reduce-scatter over the threads and either
// update keep the fixed thread order, so every count equals serial.
TEST(ClusterOneRank, EveryThreadCountUpTo16MatchesSerial) {
  for (const std::string model : {"fc3", "lenet5"}) {
    for (const int threads : testing::counts_up_to(16)) {
      Shape s;
      s.model = model;
      s.ranks = 1;
      s.threads = threads;
      s.batch = 16;  // >= the threads: every thread gets a sample
      s.steps = 3;
      expect_ranks_match_serial(s);
    }
  }
}

// Both updates sum in thread order and step with the same float operations, so they give the
// same bits; the design is a speed choice only. Also with several ranks, overlapped or not.
TEST(ClusterOneRank, ReplicasAndSlicesGiveTheSameBits) {
  for (const std::string model : {"fc3", "lenet5"}) {
    for (const auto& [ranks, threads, overlap] :
         std::vector<std::tuple<int, int, std::string>>{{1, 3, "on"}, {1, 7, "on"}, {2, 3, "on"},
                                                        {2, 2, "off"}}) {
      Shape replicas, slices;
      replicas.model = slices.model = model;
      replicas.ranks = slices.ranks = ranks;
      replicas.threads = slices.threads = threads;
      replicas.steps = slices.steps = 3;
      replicas.options = {{"node-update", "replicas"}, {"overlap", overlap}};
      slices.options = {{"node-update", "slices"}, {"overlap", overlap}};
      const auto a = train_on_simulated_ranks(replicas);
      const auto b = train_on_simulated_ranks(slices);
      for (std::size_t r = 0; r < a.size(); ++r) {
        const std::string what = describe(slices) + " rank " + std::to_string(r);
        EXPECT_EQ(a[r].params, b[r].params) << what;
        EXPECT_EQ(a[r].momentum, b[r].momentum) << what;
        EXPECT_EQ(a[r].losses, b[r].losses) << what;
        EXPECT_EQ(b[r].metrics["node-update"], "slices") << what;
      }
      expect_ranks_match_serial(slices);
    }
  }
}

// Threads pinned to more cores than the machine has wrap around its cores and still train right.
TEST(ClusterOneRank, PinnedThreadsBeyondTheCoresWrapAround) {
  Shape s;
  s.ranks = 1;
  s.threads = 9;
  s.batch = 18;
  s.steps = 3;
  s.pin = true;
  expect_ranks_match_serial(s);
}

// A count, not a time: each thread reduces and steps O(n) floats whatever T. Summing all T
// buffers on every thread (T n per thread) would make T = 8 four times T = 2.
TEST(ClusterOneRank, ReduceBytesPerThreadStayFlatFrom2To8Threads) {
  for (const std::string model : {"fc3", "lenet5"}) {
    for (const std::string update : {"auto", "replicas", "slices", "factors"}) {
      const auto bytes = [&](int threads) {
        Shape s;
        s.model = model;
        s.ranks = 1;
        s.threads = threads;
        s.batch = 16;
        s.steps = 2;
        s.options = {{"node-update", update}};
        return train_on_simulated_ranks(s)[0].metrics["reduce_bytes_per_thread"].get<double>();
      };
      const double two = bytes(2), eight = bytes(8);
      const double n = static_cast<double>(model_spec(parse_model(model)).param_count);
      const std::string what = model + " --node-update " + update;
      EXPECT_GT(two, 0) << what;
      EXPECT_LE(eight, 1.5 * two) << what << ": T = 2 " << two << " B, T = 8 " << eight << " B";
      // At most n read for the sum plus the sum written, read and stepped (params, momentum),
      // and a few cache lines where the slices round.
      EXPECT_LE(eight, 1.01 * sizeof(float) * (n + n / 8 + 3 * n)) << what;
    }
  }
  // The rule (measured on 2 cores): FC-3, whose first layer is dense, takes factors on one rank
  // of several threads; LeNet-5, and FC-3 over ranks, replicas.
  Shape lenet5, fc3;
  lenet5.model = "lenet5";
  lenet5.ranks = fc3.ranks = 1;
  lenet5.threads = fc3.threads = 2;
  lenet5.steps = fc3.steps = 1;
  EXPECT_EQ(train_on_simulated_ranks(lenet5)[0].metrics["node-update"], "replicas");
  EXPECT_EQ(train_on_simulated_ranks(fc3)[0].metrics["node-update"], "factors");
  Shape fc3_ranks = fc3;
  fc3_ranks.ranks = 2;
  EXPECT_EQ(train_on_simulated_ranks(fc3_ranks)[0].metrics["node-update"], "replicas");
  EXPECT_EQ(auto_node_update(ModelKind::fc3, 266610, 1, 1), NodeUpdate::replicas);
  EXPECT_EQ(auto_node_update(ModelKind::lenet5, std::size_t{5} << 20, 1, 2), NodeUpdate::slices);
}

// Factors: every thread computes its rows of f1 over the whole batch (FC-3: forward and weight
// gradient; LeNet-5: the weight gradient), the other layers summed in slices. Equal to serial
// as every strategy is (loss curve, then one step from a shared state), with any thread count
// and balanced shares of every size, and in f1.weight bit for bit after one step: its gradient
// sums the batch's samples in order, as serial does. A thread that summed only its own samples,
// or rows computed from the wrong share, fails here.
TEST(ClusterOneRank, FactorsMatchSerialAndF1WeightToTheBit) {
  for (const std::string model : {"fc3", "lenet5"}) {
    for (const auto& [threads, balance] : std::vector<std::pair<int, std::string>>{
             {2, "static"}, {3, "dynamic"}, {5, "static"}}) {
      Shape s;
      s.model = model;
      s.ranks = 1;
      s.threads = threads;
      s.steps = 6;
      s.options = {{"node-update", "factors"}, {"balance", balance}};
      expect_ranks_match_serial(s);
      Shape one = s;
      one.steps = 1;
      const std::vector<Trained> ranks = train_on_simulated_ranks(one);
      EXPECT_EQ(ranks[0].metrics["node-update"], "factors") << describe(s);
      const testing::Trained serial = testing::train_serially(one.serial());
      const ParamTensor& f1 = model_spec(parse_model(model)).tensor("f1.weight");
      const auto part = [&f1](const std::vector<float>& all) {
        return std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(f1.offset),
                                  all.begin() + static_cast<std::ptrdiff_t>(f1.offset + f1.count));
      };
      // The own kernels sum every element in order of the batch; OpenBLAS, which every dense
      // layer runs on where the target has no FMA or is narrower than its kernels (CNNBENCH_ISA
      // avx2 or sse4 on an AVX-512 machine), blocks the sum its own way, so bits hold only there.
      if (!dense_all_on_sgemm()) {
        EXPECT_EQ(part(ranks[0].params), part(serial.params)) << describe(s);
        EXPECT_EQ(part(ranks[0].momentum), part(serial.momentum)) << describe(s);
      }
      // The other tensors sum per-thread partial gradients: the test above would pass if the
      // whole model were computed serially.
      EXPECT_NE(ranks[0].params, serial.params) << describe(s) << ": nothing was summed across threads";
    }
  }
}

// Factors takes one rank: the ranks do not share the threads' memory.
TEST(ClusterOnSimulatedRanks, FactorsOverRanksIsRefusedByName) {
  Shape s;
  s.ranks = 2;
  s.threads = 2;
  s.steps = 1;
  s.options = {{"node-update", "factors"}};
  try {
    train_on_simulated_ranks(s);
    ADD_FAILURE() << "factors over 2 ranks ran";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("--node-update factors: a job of 2 ranks"), std::string::npos)
        << e.what();
  }
}

TEST(ClusterOneRank, SlicesAreWholeCacheLinesCoveringTheBuffer) {
  for (const std::size_t count : {std::size_t{0}, std::size_t{5}, std::size_t{61706},
                                  std::size_t{266610}}) {
    for (int parts = 1; parts <= 16; ++parts) {
      const auto slices = cache_line_slices(count, parts);
      ASSERT_EQ(slices.size(), static_cast<std::size_t>(parts));
      std::size_t next = 0, largest = 0, smallest = count;
      for (std::size_t p = 0; p < slices.size(); ++p) {
        EXPECT_EQ(slices[p].begin, next) << count << " floats, part " << p;
        EXPECT_EQ(slices[p].begin % floats_per_cache_line, 0u);
        if (p + 1 < slices.size()) {
          EXPECT_EQ(slices[p].end % floats_per_cache_line, 0u);
        }
        largest = std::max(largest, slices[p].size());
        smallest = std::min(smallest, slices[p].size());
        next = slices[p].end;
      }
      EXPECT_EQ(next, count);
      EXPECT_LE(largest - smallest, 2 * floats_per_cache_line) << count << " over " << parts;
    }
  }
}

}  // namespace
}  // namespace cnnbench
