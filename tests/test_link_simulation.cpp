// The link simulation against hand-computed times and against the closed-form costs, and
// libnbc's choice of MPI_Iallreduce algorithm.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "cnnbench/collective_model.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/link_simulation.hpp"

namespace cnnbench {
namespace {

using A = AllreduceAlgorithm;

const CollectiveCost cost{{2e-5, 1e-9}, 1e-10};

double simulated_allreduce(A algorithm, int ranks, double bytes, const CollectiveCost& link) {
  StarNetwork star;
  star.hosts = ranks;
  star.link = link;
  const std::vector<std::pair<A, double>> one{{algorithm, bytes}};
  return simulate_steps(star, 0.0, one, 2).first_step_s;
}

// Unshaped, one allreduce: the simulation's message-by-message schedule takes what the closed
// form says, powers of two and not, for every algorithm both price.
TEST(LinkSimulation, UnshapedAllreducesTakeTheirClosedFormCost) {
  for (A algorithm : {A::ring, A::recursive_doubling, A::rabenseifner, A::binomial}) {
    for (int ranks : {2, 3, 4, 5, 6, 8, 16}) {
      SCOPED_TRACE(std::string(algorithm_name(algorithm)) + " on " + std::to_string(ranks));
      const double expected = allreduce_seconds(algorithm, ranks, 1e6, cost);
      EXPECT_NEAR(simulated_allreduce(algorithm, ranks, 1e6, cost), expected, 1e-9 * expected);
    }
  }
}

// libnbc's binomial broadcast sends from the root to all its children at once: on 4 ranks with
// no latency and 1 ms per message, the reduce takes 2 ms (1 -> 0 with 3 -> 2, then 2 -> 0),
// the root's two messages share its link (2 ms), then rank 1 sends to rank 3 (1 ms).
TEST(LinkSimulation, BinomialBroadcastSharesTheRootsLink) {
  const CollectiveCost plain{{0, 1e-9}, 0};
  EXPECT_NEAR(allreduce_seconds(A::binomial, 4, 1e6, plain), 5e-3, 1e-12);
  EXPECT_NEAR(simulated_allreduce(A::binomial, 4, 1e6, plain), 5e-3, 1e-12);
  // On 2 ranks: up and down, 2 ms.
  EXPECT_NEAR(simulated_allreduce(A::binomial, 2, 1e6, plain), 2e-3, 1e-12);
}

// An empty bucket passes only the rate, in wire bytes: a 1 MB binomial allreduce on 2 ranks
// moves 1 MB up and 1 MB down, each at 12.5 MB/s of wire bytes, whatever the compute.
TEST(LinkSimulation, ShapedLinkWithoutBurstPassesTheRate) {
  StarNetwork star;
  star.hosts = 2;
  star.link = CollectiveCost{{1e-4, 1e-10}, 1e-10};
  star.shaping = ShapedLink{1.25e7, 0};
  const double n = 1e6, o = star.shaping->wire_bytes_per_byte;
  const std::vector<std::pair<A, double>> one{{A::binomial, n}};
  const SimulatedStep step = simulate_steps(star, 0.003, one);
  EXPECT_NEAR(step.communication_s, 2 * (1e-4 + n * o / 1.25e7) + n * 1e-10, 1e-9);
  EXPECT_NEAR(step.step_s, 0.003 + step.communication_s, 1e-12);
}

// A bucket refilled while the ranks compute sends its tokens' worth at the link's own speed:
// each direction's first (burst - one frame) wire bytes go at 1 GB/s while the bucket drains at
// 1 GB/s x wire - rate, the rest at the rate.
TEST(LinkSimulation, BurstRefilledDuringComputePassesAtFullSpeed) {
  StarNetwork star;
  star.hosts = 2;
  const double speed = 1e9, rate = 1.25e7, burst = 2e5, n = 1e6;
  star.link = CollectiveCost{{0, 1 / speed}, 0};
  star.shaping = ShapedLink{rate, burst};
  const double o = star.shaping->wire_bytes_per_byte;
  const std::vector<std::pair<A, double>> one{{A::binomial, n}};
  const double fast = (burst - 1514) / (speed * o - rate);
  const double direction = fast + (n - speed * fast) * o / rate;
  // 40 ms of compute refills 500 kB > the burst.
  EXPECT_NEAR(simulate_steps(star, 0.04, one).communication_s, 2 * direction, 1e-9);
}

// When the rate cannot refill what a step sends, the steady state is the rate's: each direction
// carries n wire-bytes-worth per step, 100 kB x 1514/1448 at 12.5 MB/s = 8.4 ms, not the
// 1.2 ms that compute and the link's own speed would take.
TEST(LinkSimulation, SteadyStateIsBoundByTheRate) {
  StarNetwork star;
  star.hosts = 2;
  const double rate = 1.25e7, n = 1e5;
  star.link = CollectiveCost{{0, 1e-9}, 0};
  star.shaping = ShapedLink{rate, 2e5};
  const std::vector<std::pair<A, double>> one{{A::binomial, n}};
  const SimulatedStep step = simulate_steps(star, 0.001, one);
  EXPECT_NEAR(step.step_s, n * star.shaping->wire_bytes_per_byte / rate, 1e-3 * step.step_s);
  // The first step still drew on the full bucket.
  EXPECT_NEAR(step.first_step_s, 0.001 + 2 * n * 1e-9, 1e-12);
}

// Two allreduces started together share the links: 2 ranks, recursive doubling of 1 MB twice
// takes as long as of 2 MB once, less one latency.
TEST(LinkSimulation, ConcurrentAllreducesShareTheLinks) {
  StarNetwork star;
  star.hosts = 2;
  star.link = CollectiveCost{{1e-5, 1e-9}, 0};
  const std::vector<std::pair<A, double>> two{{A::recursive_doubling, 1e6}, {A::recursive_doubling, 1e6}};
  EXPECT_NEAR(simulate_steps(star, 0.0, two, 2).first_step_s, 1e-5 + 2e-3, 1e-12);
}

TEST(LinkSimulation, SchedulesCarryWhatTheAlgorithmSends) {
  // The ring: every rank sends 2(p-1) blocks of n/p.
  for (const RankSchedule& rank : allreduce_schedule(A::ring, 4, 4e6)) {
    double sent = 0;
    for (const ScheduleRound& round : rank) {
      for (const auto& send : round.sends) sent += send.second;
    }
    EXPECT_NEAR(sent, 6e6, 1e-6);
  }
  // Binomial on 8 ranks: rank 0 receives 3 times and sends 3 times, all in one round.
  const RankSchedule root = allreduce_schedule(A::binomial, 8, 1.0)[0];
  ASSERT_EQ(root.size(), 4u);
  EXPECT_EQ(root.back().sends.size(), 3u);
  EXPECT_THROW(allreduce_schedule(A::open_mpi_default, 4, 1.0), Error);
  StarNetwork star;
  star.hosts = 2;
  EXPECT_THROW(simulate_steps(star, -1.0, {}, 4), Error);
}

// Open MPI 4.1's libnbc (nbc_iallreduce.c): in place, the cluster strategy's call, always the
// binomial schedule; otherwise binomial below 4 ranks or 64 KiB, then Rabenseifner.
TEST(LinkSimulation, LibnbcChoosesItsIallreduceAlgorithm) {
  EXPECT_EQ(nonblocking_algorithm_run(A::open_mpi_default, 1 << 20, 16, true), A::binomial);
  EXPECT_EQ(nonblocking_algorithm_run(A::open_mpi_default, 1 << 20, 3, false), A::binomial);
  EXPECT_EQ(nonblocking_algorithm_run(A::open_mpi_default, 16383, 4, false), A::binomial);
  EXPECT_EQ(nonblocking_algorithm_run(A::open_mpi_default, 16384, 4, false), A::rabenseifner);
  // Forced Rabenseifner with fewer elements than the power-of-two part: libnbc runs the ring.
  EXPECT_EQ(nonblocking_algorithm_run(A::rabenseifner, 3, 5, false), A::ring);
  EXPECT_EQ(nonblocking_algorithm_run(A::recursive_doubling, 3, 5, true), A::recursive_doubling);
  EXPECT_THROW(nonblocking_algorithm_run(A::segmented_ring, 100, 4, false), Error);
  EXPECT_EQ(libnbc_algorithm_id(A::binomial), 2);
  EXPECT_EQ(libnbc_algorithm_id(A::rabenseifner), 3);
  EXPECT_THROW(libnbc_algorithm_id(A::basic_linear), Error);
  EXPECT_EQ(algorithm_by_rule(AllreduceRule::open_mpi_iallreduce_in_place, 4, 1e6, cost), A::binomial);
  EXPECT_EQ(rule_name(AllreduceRule::open_mpi_iallreduce_in_place), "open_mpi_iallreduce_in_place");
}

}  // namespace
}  // namespace cnnbench
