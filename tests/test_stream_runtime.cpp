// Stream runtime: rate balancing and the errors naming the bad edge, steady-state and init
// schedules, partition quality against brute force, stage assignment, SPSC channels, the
// executor under stress at widths 1, 2, 3, 4, 7 with random delays, checked against naive twins,
// and links: feedback edges bounding a loop's lead at the same widths, forward links, bad links.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <numeric>
#include <thread>

#include "cnnbench/core.hpp"
#include "cnnbench/stream.hpp"
#include "error_message.hpp"

namespace cnnbench::stream {
namespace {

using test::error_of;

// An actor whose firing is a lambda: the tests' building block.
class LambdaActor final : public Actor {
 public:
  using Body = std::function<void(Firing&)>;
  LambdaActor(std::string name, std::vector<Port> inputs, std::vector<Port> outputs, Body body)
      : Actor(std::move(name), std::move(inputs), std::move(outputs)), body_(std::move(body)) {}
  void fire(Firing& firing) override { body_(firing); }

 private:
  Body body_;
};

Node lambda(std::string name, std::vector<Port> inputs, std::vector<Port> outputs,
            LambdaActor::Body body) {
  return Node::filter(std::make_shared<LambdaActor>(std::move(name), std::move(inputs),
                                                    std::move(outputs), std::move(body)));
}

// Busy-waits a random few microseconds so that threads interleave differently on every run.
void random_delay(Rng& rng, int max_microseconds) {
  const double until = now_seconds() + 1e-6 * static_cast<double>(rng.below(max_microseconds + 1));
  while (now_seconds() < until) {
  }
}

// A source of tokens of `elements` floats: token n holds n*1000 + i.
Node counting_source(const std::string& name, std::size_t elements, int push = 1) {
  auto next = std::make_shared<std::int64_t>(0);
  return lambda(name, {}, {f32_port(elements, push)}, [next, elements, push](Firing& f) {
    for (int k = 0; k < push; ++k) {
      const TokenRef out = f.output(0, static_cast<std::size_t>(k));
      out.header().sequence = *next;
      for (std::size_t i = 0; i < elements; ++i) {
        out.as<float>()[i] = static_cast<float>(*next * 1000 + static_cast<std::int64_t>(i));
      }
      ++*next;
    }
  });
}

// A sink keeping every token's payload.
Node collecting_sink(const std::string& name, std::size_t elements,
                     std::shared_ptr<std::vector<std::vector<float>>> into, int pop = 1) {
  return lambda(name, {f32_port(elements, pop)}, {}, [into, pop](Firing& f) {
    for (int k = 0; k < pop; ++k) {
      const auto values = f.input(0, static_cast<std::size_t>(k)).as<float>();
      into->emplace_back(values.begin(), values.end());
    }
  });
}

// `graph` spread over cores as `core_of` says, stages assigned to match.
Partition placed_on(const Graph& graph, const Schedule& schedule, int cores,
                    std::vector<int> core_of) {
  Partition partition = single_core_partition(graph, schedule);
  partition.cores = cores;
  partition.core_work.assign(static_cast<std::size_t>(cores), 0.0);
  partition.core_of = std::move(core_of);
  partition.stage_of = assign_stages(graph, partition.core_of);
  return partition;
}

// ---- rates and schedules ------------------------------------------------------------------------

TEST(StreamSchedule, SteadyStateBalancesEveryEdgeWithSmallestIntegers) {
  auto seen = std::make_shared<std::vector<std::vector<float>>>();
  // source pushes 2, filter pops 3 pushes 1, sink pops 2: source 3x, filter 2x, sink 1x.
  const Node root = Node::pipeline(
      "rates", {counting_source("src", 1, 2),
                lambda("three_to_one", {f32_port(1, 3)}, {f32_port(1, 1)}, [](Firing&) {}),
                collecting_sink("sink", 1, seen, 2)});
  const Graph graph = flatten(root);
  const Schedule schedule = make_schedule(graph);
  ASSERT_EQ(schedule.steady.size(), 3u);
  for (const Edge& e : graph.edges) {
    EXPECT_EQ(schedule.steady[e.from] * graph.actors[e.from]->outputs()[0].rate,
              schedule.steady[e.to] * graph.actors[e.to]->inputs()[0].rate)
        << graph.edge_name(e);
  }
  EXPECT_EQ(std::gcd(std::gcd(schedule.steady[0], schedule.steady[1]), schedule.steady[2]), 1);
  EXPECT_EQ(schedule.steady, (std::vector<std::int64_t>{3, 2, 1}));
  EXPECT_EQ(schedule.init, (std::vector<std::int64_t>{0, 0, 0}));
}

TEST(StreamSchedule, UnbalancedSplitJoinNamesTheEdge) {
  auto seen = std::make_shared<std::vector<std::vector<float>>>();
  // One branch halves the token rate, the other keeps it: the join can't balance.
  const Node root = Node::pipeline(
      "bad", {counting_source("src", 4),
              Node::splitjoin("sj", Split::duplicate(),
                              {lambda("halve", {f32_port(4, 2)}, {f32_port(4)}, [](Firing&) {}),
                               lambda("keep", {f32_port(4)}, {f32_port(4)}, [](Firing&) {})},
                              Join::sum()),
              collecting_sink("sink", 4, seen)});
  const Graph graph = flatten(root);
  const std::string message = error_of([&] { make_schedule(graph); });
  EXPECT_NE(message.find("rates don't balance on edge '"), std::string::npos) << message;
  EXPECT_NE(message.find(" -> "), std::string::npos) << message;
  EXPECT_TRUE(message.find("halve") != std::string::npos ||
              message.find("keep") != std::string::npos)
      << message;
}

TEST(StreamGraph, TypeMismatchNamesTheEdge) {
  auto seen = std::make_shared<std::vector<std::vector<float>>>();
  const Node root =
      Node::pipeline("p", {counting_source("producer", 4), collecting_sink("consumer", 5, seen)});
  const std::string message = error_of([&] { flatten(root); });
  EXPECT_NE(message.find("'producer -> consumer'"), std::string::npos) << message;
  EXPECT_NE(message.find("f32[4]"), std::string::npos) << message;
  EXPECT_NE(message.find("f32[5]"), std::string::npos) << message;
}

TEST(StreamGraph, RoundRobinWeightsThatDontDivideNameTheBranch) {
  auto seen = std::make_shared<std::vector<std::vector<float>>>();
  const Node root = Node::pipeline(
      "p", {counting_source("src", 12),
            Node::splitjoin("sj", Split::round_robin({2, 4}),
                            {lambda("a", {f32_port(4)}, {f32_port(4)}, [](Firing&) {}),
                             lambda("b", {f32_port(6)}, {f32_port(6)}, [](Firing&) {})},
                            Join::concatenate({2, 3})),
            collecting_sink("sink", 10, seen)});
  const std::string message = error_of([&] { flatten(root); });
  EXPECT_NE(message.find("branch 'b'"), std::string::npos) << message;
}

TEST(StreamSchedule, PeekingFilterGetsAnInitScheduleAndSlidingSums) {
  auto seen = std::make_shared<std::vector<std::vector<float>>>();
  // window of 3 scalars, advancing by 1: the producer must run 2 extra firings first.
  const Node root = Node::pipeline(
      "peek", {counting_source("src", 1),
               lambda("window3", {f32_port(1, 1, 3)}, {f32_port(1)},
                      [](Firing& f) {
                        float sum = 0;
                        for (std::size_t k = 0; k < 3; ++k) sum += f.input(0, k).as<float>()[0];
                        f.output(0).as<float>()[0] = sum;
                      }),
               collecting_sink("sink", 1, seen)});
  Graph graph = flatten(root);
  const Schedule schedule = make_schedule(graph);
  EXPECT_EQ(schedule.init, (std::vector<std::int64_t>{2, 0, 0}));
  Executor executor(graph, schedule, single_core_partition(graph, schedule),
                    ExecutorOptions{.pin = false});
  executor.run(10);
  executor.run(5);
  ASSERT_EQ(seen->size(), 15u);
  for (std::size_t n = 0; n < seen->size(); ++n) {
    const float expected = 1000.0f * static_cast<float>(3 * n + 3);  // n + (n+1) + (n+2), x1000
    EXPECT_EQ((*seen)[n][0], expected) << "window " << n;
  }
}

// ---- partitioning -----------------------------------------------------------------------------

// The smallest possible busiest-core load over every assignment of units to cores.
double brute_force_makespan(const std::vector<double>& work, int cores) {
  std::vector<int> core_of(work.size(), 0);
  double best = 1e300;
  for (;;) {
    best = std::min(best, busiest_core_work(work, core_of, cores));
    std::size_t i = 0;
    while (i < core_of.size() && ++core_of[i] == cores) core_of[i++] = 0;
    if (i == core_of.size()) return best;
  }
}

TEST(StreamPartition, LptPlusRefinementStaysNearTheBruteForceOptimum) {
  Rng rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    const int cores = 2 + static_cast<int>(rng.below(2));
    const std::size_t units = 3 + rng.below(6);
    std::vector<double> work(units);
    for (double& w : work) w = 0.1 + rng.next_float();
    std::vector<Traffic> traffic;
    for (std::size_t u = 1; u < units; ++u) {
      traffic.push_back({static_cast<int>(u - 1), static_cast<int>(u), rng.next_float() * 100});
    }
    const double tolerance = 0.05;
    const std::vector<int> core_of = assign_cores(work, traffic, cores, tolerance);
    ASSERT_EQ(core_of.size(), units);
    for (int c : core_of) ASSERT_TRUE(c >= 0 && c < cores);
    const double optimum = brute_force_makespan(work, cores);
    // Graham's LPT bound, widened by the refinement's tolerance.
    const double bound = (4.0 / 3.0 - 1.0 / (3.0 * cores)) * (1 + tolerance) * optimum;
    EXPECT_LE(busiest_core_work(work, core_of, cores), bound + 1e-9) << "trial " << trial;
  }
}

TEST(StreamPartition, RefinementCutsTrafficWithoutUnbalancing) {
  // Four equal units in a chain; LPT alone would alternate cores and cut all three heavy edges.
  const std::vector<double> work = {1, 1, 1, 1};
  const std::vector<Traffic> traffic = {{0, 1, 100}, {1, 2, 1}, {2, 3, 100}};
  const std::vector<int> core_of = assign_cores(work, traffic, 2, 0.05);
  EXPECT_DOUBLE_EQ(busiest_core_work(work, core_of, 2), 2.0);
  EXPECT_DOUBLE_EQ(cross_core_bytes(traffic, core_of), 1.0);
}

TEST(StreamPartition, StagesGrowAcrossCores) {
  auto seen = std::make_shared<std::vector<std::vector<float>>>();
  const Node root = Node::pipeline(
      "chain", {counting_source("a", 1),
                lambda("b", {f32_port(1)}, {f32_port(1)}, [](Firing&) {}),
                lambda("c", {f32_port(1)}, {f32_port(1)}, [](Firing&) {}),
                collecting_sink("d", 1, seen)});
  const Graph graph = flatten(root);
  EXPECT_EQ(assign_stages(graph, std::vector<int>{0, 1, 1, 0}), (std::vector<int>{0, 1, 1, 2}));
  EXPECT_EQ(assign_stages(graph, std::vector<int>{0, 0, 0, 0}), (std::vector<int>{0, 0, 0, 0}));
}

TEST(StreamPartition, PlacementKeysKeepActorsTogetherAndDotShowsClusters) {
  auto seen = std::make_shared<std::vector<std::vector<float>>>();
  std::vector<Node> branches;
  for (int b = 0; b < 4; ++b) {
    branches.push_back(lambda("branch" + std::to_string(b), {f32_port(2)}, {f32_port(2)},
                              [](Firing&) {}));
  }
  Graph graph = flatten(Node::pipeline(
      "p", {counting_source("src", 8),
            Node::splitjoin("sj", Split::round_robin(), std::move(branches), Join::concatenate()),
            collecting_sink("sink", 8, seen)}));
  for (auto& actor : graph.actors) actor->set_work_estimate(1e-3);
  graph.actors[0]->set_placement("ends");
  graph.actors.back()->set_placement("ends");
  const Schedule schedule = make_schedule(graph);
  const Partition partition = partition_graph(graph, schedule, 2);
  EXPECT_EQ(partition.core_of.front(), partition.core_of.back());
  EXPECT_GT(partition.predicted_speedup, 1.0);
  const std::string dot = graph_dot(graph, partition, "test");
  EXPECT_NE(dot.find("subgraph cluster_core0"), std::string::npos);
  EXPECT_NE(dot.find("subgraph cluster_core1"), std::string::npos);
  EXPECT_NE(dot.find("branch3"), std::string::npos);
}

// ---- channels and the executor under stress ---------------------------------------------------

class ChannelStress : public ::testing::TestWithParam<int> {};

TEST_P(ChannelStress, EveryTokenArrivesOnceInOrderWithItsPayload) {
  const auto capacity = static_cast<std::size_t>(GetParam());
  Channel channel(capacity, 3 * sizeof(float));
  constexpr std::int64_t tokens = 20000;
  std::thread producer([&] {
    Rng rng(1);
    for (std::int64_t n = 0; n < tokens; ++n) {
      while (!channel.has_room(1)) std::this_thread::yield();
      const TokenRef slot = channel.write_slot(0);
      slot.header().sequence = n;
      for (int i = 0; i < 3; ++i) slot.as<float>()[i] = static_cast<float>(n + i);
      if (rng.below(64) == 0) random_delay(rng, 20);
      channel.push(1);
    }
  });
  Rng rng(2);
  for (std::int64_t n = 0; n < tokens; ++n) {
    while (!channel.has_tokens(1)) std::this_thread::yield();
    const TokenRef slot = channel.read_slot(0);
    ASSERT_EQ(slot.header().sequence, n);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(slot.as<float>()[i], static_cast<float>(n + i));
    if (rng.below(64) == 0) random_delay(rng, 20);
    channel.pop(1);
  }
  producer.join();
  EXPECT_EQ(channel.readable(), 0u);
  EXPECT_EQ(channel.writable(), capacity);
}

INSTANTIATE_TEST_SUITE_P(Widths, ChannelStress, ::testing::Values(1, 2, 3, 4, 7));

// A splitjoin of `width` branches, each scaling its share by (branch + 1) with a random delay,
// joined by concatenation, then duplicated into a summing splitjoin; the naive twin computes
// the same numbers directly. Run on several core counts with actors spread round-robin.
class ExecutorStress : public ::testing::TestWithParam<int> {};

TEST_P(ExecutorStress, MatchesTheNaiveTwinOnEveryCoreCount) {
  const int width = GetParam();
  const std::size_t per_branch = 3, elements = per_branch * static_cast<std::size_t>(width);
  constexpr std::int64_t iterations = 300;
  for (int cores = 1; cores <= 4; ++cores) {
    auto seen = std::make_shared<std::vector<std::vector<float>>>();
    std::vector<Node> scale, sum;
    for (int b = 0; b < width; ++b) {
      // Each actor owns its Rng: actors of one branch may run on different cores.
      auto rng = std::make_shared<Rng>(static_cast<std::uint64_t>(100 * cores + b));
      auto copy_rng = std::make_shared<Rng>(static_cast<std::uint64_t>(100 * cores + b + 50));
      scale.push_back(lambda("scale" + std::to_string(b), {f32_port(per_branch)},
                             {f32_port(per_branch)}, [b, rng](Firing& f) {
                               random_delay(*rng, 5);
                               const auto in = f.input(0).as<float>();
                               const auto out = f.output(0).as<float>();
                               for (std::size_t i = 0; i < in.size(); ++i)
                                 out[i] = in[i] * static_cast<float>(b + 1);
                               f.output(0).header() = f.input(0).header();
                             }));
      sum.push_back(lambda("copy" + std::to_string(b), {f32_port(elements)}, {f32_port(elements)},
                           [copy_rng](Firing& f) {
                             random_delay(*copy_rng, 5);
                             const auto in = f.input(0).as<float>();
                             std::copy(in.begin(), in.end(), f.output(0).as<float>().begin());
                             f.output(0).header() = f.input(0).header();
                           }));
    }
    Graph graph = flatten(Node::pipeline(
        "stress",
        {counting_source("src", elements),
         Node::splitjoin("scale", Split::round_robin(), std::move(scale), Join::concatenate()),
         Node::splitjoin("sum", Split::duplicate(), std::move(sum), Join::sum()),
         collecting_sink("sink", elements, seen)}));
    const Schedule schedule = make_schedule(graph);
    Partition partition = single_core_partition(graph, schedule);
    partition.cores = cores;
    partition.core_work.assign(static_cast<std::size_t>(cores), 0.0);
    for (std::size_t a = 0; a < graph.actors.size(); ++a) {
      partition.core_of[a] = static_cast<int>(a) % cores;
    }
    partition.stage_of = assign_stages(graph, partition.core_of);
    Executor executor(graph, schedule, partition, ExecutorOptions{.pin = false});
    executor.run(iterations / 2);
    executor.run(iterations - iterations / 2);
    ASSERT_EQ(seen->size(), static_cast<std::size_t>(iterations));
    for (std::int64_t n = 0; n < iterations; ++n) {
      for (std::size_t i = 0; i < elements; ++i) {
        const auto branch = static_cast<float>(i / per_branch + 1);
        const float expected = static_cast<float>(width) * branch *
                               static_cast<float>(n * 1000 + static_cast<std::int64_t>(i));
        ASSERT_EQ((*seen)[n][i], expected) << "width " << width << " cores " << cores
                                           << " token " << n << " element " << i;
      }
    }
    std::int64_t firings = 0;
    for (const auto& stats : executor.actor_stats()) firings += stats.firings;
    EXPECT_EQ(firings, iterations * static_cast<std::int64_t>(graph.actors.size()));
    EXPECT_GE(executor.bubble_fraction(), 0.0);
    EXPECT_LE(executor.bubble_fraction(), 1.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, ExecutorStress, ::testing::Values(1, 2, 3, 4, 7));

// ---- links and feedback edges -----------------------------------------------------------------

// A closed loop: a source that spends one credit per token, a chain of `stages` copying actors
// with random delays, and a sink that pops `group` tokens at once and returns `group` credits on
// a feedback edge holding `window` initial credits. The source's lead over the sink is what flow
// control bounds; `most_ahead` records the largest it saw.
struct Loop {
  Graph graph;
  std::shared_ptr<std::vector<std::int64_t>> seen = std::make_shared<std::vector<std::int64_t>>();
  using Counter = std::atomic<std::int64_t>;
  std::shared_ptr<Counter> emitted = std::make_shared<Counter>(0);
  std::shared_ptr<Counter> finished = std::make_shared<Counter>(0);
  std::shared_ptr<std::int64_t> most_ahead = std::make_shared<std::int64_t>(0);
};

Loop make_loop(int stages, int group, int window, std::uint64_t seed) {
  Loop loop;
  auto source = std::make_shared<LambdaActor>(
      "src", std::vector<Port>{linked(f32_port(0))}, std::vector<Port>{f32_port(1)},
      [emitted = loop.emitted, finished = loop.finished, ahead = loop.most_ahead](Firing& f) {
        const std::int64_t n = emitted->fetch_add(1);
        *ahead = std::max(*ahead, n + 1 - finished->load());
        f.output(0).header().sequence = n;
        f.output(0).as<float>()[0] = static_cast<float>(n);
      });
  auto sink = std::make_shared<LambdaActor>(
      "sink", std::vector<Port>{f32_port(1, group)},
      std::vector<Port>{linked(f32_port(0, group))},
      [group, seen = loop.seen, finished = loop.finished](Firing& f) {
        for (int k = 0; k < group; ++k) {
          seen->push_back(static_cast<std::int64_t>(f.input(0, std::size_t(k)).as<float>()[0]));
        }
        finished->fetch_add(group);
      });
  std::vector<Node> pipeline{Node::filter(source)};
  for (int s = 0; s < stages; ++s) {
    auto rng = std::make_shared<Rng>(seed + static_cast<std::uint64_t>(s));
    pipeline.push_back(lambda("stage" + std::to_string(s), {f32_port(1)}, {f32_port(1)},
                              [rng](Firing& f) {
                                random_delay(*rng, 5);
                                f.output(0).header() = f.input(0).header();
                                f.output(0).as<float>()[0] = f.input(0).as<float>()[0];
                              }));
  }
  pipeline.push_back(Node::filter(sink));
  const Link links[] = {Link::back(sink, 0, source, 0, window)};
  loop.graph = flatten(Node::pipeline("loop", std::move(pipeline)), links);
  return loop;
}

TEST(StreamFeedback, TheBackEdgeBalancesButStaysOutOfTheOrderAndTheStages) {
  const Loop loop = make_loop(2, 3, 3, 1);
  const Graph& graph = loop.graph;
  ASSERT_EQ(graph.edges.size(), 4u);
  EXPECT_TRUE(graph.edges.back().feedback);
  EXPECT_EQ(graph.edges.back().initial_tokens, 3);
  EXPECT_EQ(graph.topological_order(), (std::vector<int>{0, 1, 2, 3}));
  const Schedule schedule = make_schedule(graph);
  EXPECT_EQ(schedule.steady, (std::vector<std::int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(schedule.init, (std::vector<std::int64_t>{0, 0, 0, 0}));
  const std::vector<int> stages = assign_stages(graph, std::vector<int>{0, 1, 1, 0});
  EXPECT_EQ(stages, (std::vector<int>{0, 1, 1, 2})) << "the sink -> source edge adds no stage";
  const std::string dot = graph_dot(graph, single_core_partition(graph, schedule), "loop");
  EXPECT_NE(dot.find("3 initial"), std::string::npos);
  EXPECT_NE(dot.find("style=dashed"), std::string::npos);
}

// The window bounds the source's lead on every core count, every token arrives once in order,
// and the loop returns to its initial credits after each run (three runs in a row).
class FeedbackStress : public ::testing::TestWithParam<int> {};

TEST_P(FeedbackStress, TheWindowBoundsTheSourcesLeadOnEveryCoreCount) {
  const int cores = GetParam();
  for (const auto& [group, window] : {std::pair{1, 1}, std::pair{2, 2}, std::pair{3, 6}}) {
    Loop loop = make_loop(4, group, window, 10 * static_cast<std::uint64_t>(cores));
    const Schedule schedule = make_schedule(loop.graph);
    std::vector<int> core_of(loop.graph.actors.size());
    for (std::size_t a = 0; a < core_of.size(); ++a) core_of[a] = static_cast<int>(a) % cores;
    const Partition partition = placed_on(loop.graph, schedule, cores, core_of);
    Executor executor(loop.graph, schedule, partition, ExecutorOptions{.pin = false});
    for (int run = 0; run < 3; ++run) executor.run(15);
    const std::string what = "cores " + std::to_string(cores) + " group " +
                             std::to_string(group) + " window " + std::to_string(window);
    ASSERT_EQ(loop.seen->size(), static_cast<std::size_t>(3 * 15 * group)) << what;
    for (std::size_t n = 0; n < loop.seen->size(); ++n) {
      ASSERT_EQ((*loop.seen)[n], static_cast<std::int64_t>(n)) << what;
    }
    EXPECT_LE(*loop.most_ahead, window) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, FeedbackStress, ::testing::Values(1, 2, 3, 4, 7));

// A forward link carries a side result past the stages between: the sink adds what the source
// sent straight to it to what came through the chain.
TEST(StreamFeedback, AForwardLinkSkipsTheStagesBetween) {
  auto seen = std::make_shared<std::vector<float>>();
  auto next = std::make_shared<std::int64_t>(0);
  auto source = std::make_shared<LambdaActor>(
      "src", std::vector<Port>{}, std::vector<Port>{f32_port(1), linked(f32_port(1))},
      [next](Firing& f) {
        f.output(0).as<float>()[0] = static_cast<float>(*next);
        f.output(1).as<float>()[0] = 1000.0f * static_cast<float>(*next);
        ++*next;
      });
  auto sink = std::make_shared<LambdaActor>(
      "sink", std::vector<Port>{f32_port(1), linked(f32_port(1))}, std::vector<Port>{},
      [seen](Firing& f) {
        seen->push_back(f.input(0).as<float>()[0] + f.input(1).as<float>()[0]);
      });
  const Link links[] = {Link::forward(source, 1, sink, 1)};
  Graph graph = flatten(
      Node::pipeline("p", {Node::filter(source),
                           lambda("double", {f32_port(1)}, {f32_port(1)},
                                  [](Firing& f) {
                                    f.output(0).as<float>()[0] = 2 * f.input(0).as<float>()[0];
                                  }),
                           Node::filter(sink)}),
      links);
  EXPECT_FALSE(graph.edges.back().feedback);
  const Schedule schedule = make_schedule(graph);
  const Partition partition = placed_on(graph, schedule, 2, {0, 1, 0});
  EXPECT_EQ(partition.stage_of, (std::vector<int>{0, 1, 2}));
  Executor executor(graph, schedule, partition, ExecutorOptions{.pin = false});
  executor.run(50);
  ASSERT_EQ(seen->size(), 50u);
  for (std::size_t n = 0; n < 50; ++n) ASSERT_EQ((*seen)[n], 1002.0f * static_cast<float>(n));
}

TEST(StreamFeedback, BadLinksNameTheEdge) {
  auto make = [](const std::string& name, std::vector<Port> in, std::vector<Port> out) {
    return std::make_shared<LambdaActor>(name, std::move(in), std::move(out), [](Firing&) {});
  };
  // Too few initial tokens for the consumer's window: the loop could never start.
  auto source = make("src", {linked(f32_port(0, 2))}, {f32_port(1)});
  auto sink = make("sink", {f32_port(1)}, {linked(f32_port(0, 2))});
  const Node loop = Node::pipeline("p", {Node::filter(source), Node::filter(sink)});
  const Link starved[] = {Link::back(sink, 0, source, 0, 1)};
  const std::string few = error_of([&] { flatten(loop, starved); });
  EXPECT_NE(few.find("sink -> src"), std::string::npos) << few;
  EXPECT_NE(few.find("window of 2"), std::string::npos) << few;
  // The same edge declared forward closes a cycle.
  const Link forward[] = {Link::forward(sink, 0, source, 0)};
  EXPECT_NE(error_of([&] { flatten(loop, forward); }).find("cycle"), std::string::npos);
  // A port the composites connect can't take a link.
  const Link stream_port[] = {Link::forward(source, 0, sink, 0)};
  EXPECT_NE(error_of([&] { flatten(loop, stream_port); }).find("linked ports"), std::string::npos);
  // Both ends must be in the stream.
  auto other = make("other", {}, {linked(f32_port(0, 2))});
  const Link stranger[] = {Link::back(other, 0, source, 0, 2)};
  EXPECT_NE(error_of([&] { flatten(loop, stranger); }).find("'other' is not in the stream"),
            std::string::npos);
  // Element counts must agree.
  auto wide = make("wide", {f32_port(1)}, {linked(f32_port(3, 2))});
  const Link mismatch[] = {Link::back(wide, 0, source, 0, 2)};
  const std::string types = error_of([&] {
    flatten(Node::pipeline("p", {Node::filter(source), Node::filter(wide)}), mismatch);
  });
  EXPECT_NE(types.find("pushes f32[3] tokens but src pops f32[0]"), std::string::npos) << types;
  // A stream port after a linked one is refused.
  EXPECT_NE(error_of([&] {
              flatten(Node::filter(make("odd", {linked(f32_port(1)), f32_port(1)}, {})));
            }).find("before its linked ports"),
            std::string::npos);
  // An unconnected linked port leaves the executor with an open port.
  Graph open = flatten(loop);
  const Schedule schedule = make_schedule(open);
  EXPECT_NE(error_of([&] {
              Executor executor(open, schedule, single_core_partition(open, schedule));
            }).find("no edge connects"),
            std::string::npos);
}

TEST(StreamExecutor, AnActorErrorStopsEveryCoreAndIsRethrown) {
  auto seen = std::make_shared<std::vector<std::vector<float>>>();
  auto fired = std::make_shared<int>(0);
  Graph graph = flatten(Node::pipeline(
      "p", {counting_source("src", 1),
            lambda("fails", {f32_port(1)}, {f32_port(1)},
                   [fired](Firing&) {
                     if (++*fired == 5) fail("actor 'fails' gave up");
                   }),
            collecting_sink("sink", 1, seen)}));
  const Schedule schedule = make_schedule(graph);
  const Partition partition = placed_on(graph, schedule, 2, {0, 1, 0});
  Executor executor(graph, schedule, partition, ExecutorOptions{.pin = false});
  EXPECT_NE(error_of([&] { executor.run(100); }).find("gave up"), std::string::npos);
  EXPECT_NE(error_of([&] { executor.run(1); }).find("rebuild"), std::string::npos);
}

}  // namespace
}  // namespace cnnbench::stream
