// The allreduce cost model against values computed by hand from the formulas of Thakur,
// Rabenseifner & Gropp (2005): each algorithm's cost, the cheapest choice just below and above
// crossovers solved on paper, Open MPI's fallbacks, the weighted fit on synthetic times with a
// known alpha and beta, and the step prediction.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cnnbench/cluster_prediction.hpp"
#include "cnnbench/collective_model.hpp"
#include "cnnbench/records.hpp"
#include "cnnbench/core.hpp"
#include "error_message.hpp"
#include "run_cli.hpp"
#include "temp_dir.hpp"

namespace cnnbench {
namespace {

template <class Action>
void expect_error_containing(Action&& action, const std::string& part) {
  const std::string message = test::error_of(action);
  EXPECT_NE(message.find(part), std::string::npos) << "error was: '" << message << "'";
}

// alpha 10 us, beta 1 ns/byte (1 GB/s), gamma 0.2 ns/byte.
const CollectiveCost cost{{1e-5, 1e-9}, 2e-10};

TEST(CollectiveModel, CostsByHand) {
  const double n = 1e6;
  // Ring, p = 4: 2*3*1e-5 + 2*3/4*1e6*1e-9 + 3/4*1e6*2e-10 = 6e-5 + 1.5e-3 + 1.5e-4.
  EXPECT_NEAR(allreduce_seconds(AllreduceAlgorithm::ring, 4, n, cost), 1.71e-3, 1e-12);
  // Recursive doubling, p = 4: lg 4 (1e-5 + 1e-3 + 2e-4).
  EXPECT_NEAR(allreduce_seconds(AllreduceAlgorithm::recursive_doubling, 4, n, cost), 2.42e-3, 1e-12);
  // Rabenseifner, p = 4: 2*2*1e-5 + 1.5e-3 + 1.5e-4.
  EXPECT_NEAR(allreduce_seconds(AllreduceAlgorithm::rabenseifner, 4, n, cost), 1.69e-3, 1e-12);
  // Basic linear, p = 4: 2*3*(1e-5 + 1e-3) + 3*2e-4.
  EXPECT_NEAR(allreduce_seconds(AllreduceAlgorithm::basic_linear, 4, n, cost), 6.66e-3, 1e-12);
  // Ring, p = 6: 10e-5 + 10/6*1e-3 + 5/6*2e-4.
  EXPECT_NEAR(allreduce_seconds(AllreduceAlgorithm::ring, 6, n, cost), 1e-4 + 1e-2 / 6 + 1e-3 / 6, 1e-12);
  // Recursive doubling, p = 6 (2 extra ranks folded in): (2 + 2)(1e-5 + 1e-3) + (2 + 1)*2e-4.
  EXPECT_NEAR(allreduce_seconds(AllreduceAlgorithm::recursive_doubling, 6, n, cost), 4.64e-3, 1e-12);
  // Rabenseifner, p = 6: p' = 4 core 1.69e-3, halves exchanged 2e-5 + 1e-3 + 1e-4, result sent
  // back 1e-5 + 1e-3.
  EXPECT_NEAR(allreduce_seconds(AllreduceAlgorithm::rabenseifner, 6, n, cost), 3.82e-3, 1e-12);
  // One rank communicates nothing.
  EXPECT_EQ(allreduce_seconds(AllreduceAlgorithm::ring, 1, n, cost), 0.0);
  // Nonoverlapping, p = 4: binomial reduce and broadcast, 2 rounds each: 4(1e-5 + 1e-3) + 2*2e-4.
  EXPECT_NEAR(allreduce_seconds(AllreduceAlgorithm::nonoverlapping, 4, n, cost), 4.44e-3, 1e-12);
  // Open MPI's default at p = 4 and 1 MB is Rabenseifner (its table: from 8 kB up).
  EXPECT_NEAR(allreduce_seconds(AllreduceAlgorithm::open_mpi_default, 4, n, cost), 1.69e-3, 1e-12);
}

TEST(CollectiveModel, HierarchicalByHand) {
  HierarchicalFabric fabric;
  fabric.nodes = 2;
  fabric.ranks_per_node = 4;
  fabric.network = cost;
  fabric.shared_memory = {{1e-6, 1e-10}, 2e-10};
  const double n = 1e6;
  // lg 4 = 2 levels: reduce 2(1e-6 + 1e-4 + 2e-4), broadcast 2(1e-6 + 1e-4); between the 2
  // leaders the ring (= Rabenseifner at p = 2, ring first on ties): 2e-5 + 1e-3 + 1e-4.
  const double expected = 6.02e-4 + 2.02e-4 + 1.12e-3;
  EXPECT_NEAR(hierarchical_allreduce_seconds(fabric, n), expected, 1e-12);
  // Flat over the 8 ranks with network costs, Rabenseifner: 6e-5 + 1.75e-3 + 1.75e-4 = 1.985e-3,
  // more than the hierarchy's 1.924e-3.
  const AllreduceChoice choice = cheapest_allreduce(fabric, n);
  EXPECT_EQ(choice.algorithm, "hierarchical");
  EXPECT_NEAR(choice.seconds, expected, 1e-12);
}

TEST(CollectiveModel, CheapestJustBelowAndAboveHandSolvedCrossovers) {
  // p = 4, gamma = 0: recursive doubling 2a + 2nb, Rabenseifner 4a + 1.5nb (ring 6a + 1.5nb is
  // never cheaper): equal at n = 4a/b = 40,000 bytes.
  const CollectiveCost no_gamma{{1e-5, 1e-9}, 0};
  EXPECT_EQ(cheapest_allreduce(4, 39000, no_gamma).algorithm, "recursive_doubling");
  EXPECT_EQ(cheapest_allreduce(4, 41000, no_gamma).algorithm, "rabenseifner");
  auto crossovers = allreduce_crossovers(4, no_gamma, 4, 4 << 20);
  ASSERT_EQ(crossovers.size(), 1u);
  EXPECT_NEAR(crossovers[0].bytes, 40000, 40000 * 0.002);
  EXPECT_EQ(crossovers[0].below, "recursive_doubling");
  EXPECT_EQ(crossovers[0].above, "rabenseifner");

  // With gamma: 2a + 2n(b + g) = 4a + 1.5nb + 0.75ng at n = 2a / (0.5b + 1.25g) = 26,666.7.
  crossovers = allreduce_crossovers(4, cost, 4, 4 << 20);
  ASSERT_EQ(crossovers.size(), 1u);
  EXPECT_NEAR(crossovers[0].bytes, 2e-5 / 7.5e-10, 26667 * 0.002);

  // p = 3: recursive doubling (1 step, 1 extra rank) 3a + 3nb, ring 4a + (4/3)nb, Rabenseifner
  // 5a + 3nb: recursive doubling up to n = 0.6 a/b = 6,000 bytes, the ring above.
  EXPECT_EQ(cheapest_allreduce(3, 5900, no_gamma).algorithm, "recursive_doubling");
  EXPECT_EQ(cheapest_allreduce(3, 6100, no_gamma).algorithm, "ring");
  crossovers = allreduce_crossovers(3, no_gamma, 4, 4 << 20);
  ASSERT_EQ(crossovers.size(), 1u);
  EXPECT_NEAR(crossovers[0].bytes, 6000, 6000 * 0.002);
  EXPECT_EQ(crossovers[0].above, "ring");
}

// Without alpha, the ring and Rabenseifner cost the same at a power of two (2(p-1)/p n beta each):
// a tie, which the ring keeps at every size, not a crossover wherever their last bits differ.
TEST(CollectiveModel, EqualFormulasAreATieNotACrossover) {
  const CollectiveCost bandwidth_only{{0, 1e-8}, 1e-10};
  for (int ranks : {4, 16}) {
    EXPECT_TRUE(allreduce_crossovers(ranks, bandwidth_only, 4, 1 << 30).empty()) << ranks;
    for (double bytes : {1e3, 1e5, 3.3e6, 7.7e7}) {
      EXPECT_EQ(cheapest_allreduce(ranks, bytes, bandwidth_only).algorithm, "ring") << ranks << " " << bytes;
    }
  }
}

TEST(CollectiveModel, OpenMpiFallbacks) {
  using A = AllreduceAlgorithm;
  // Ring: count < p runs recursive doubling.
  EXPECT_EQ(algorithm_run(A::ring, 3, 4), A::recursive_doubling);
  EXPECT_EQ(algorithm_run(A::ring, 4, 4), A::ring);
  EXPECT_EQ(algorithm_run(A::ring, 1, 2), A::recursive_doubling);
  // Rabenseifner: count < 2^floor(lg p) runs basic linear (p = 6: 4; p = 4: 4; p = 2: 2).
  EXPECT_EQ(algorithm_run(A::rabenseifner, 3, 6), A::basic_linear);
  EXPECT_EQ(algorithm_run(A::rabenseifner, 4, 6), A::rabenseifner);
  EXPECT_EQ(algorithm_run(A::rabenseifner, 3, 4), A::basic_linear);
  EXPECT_EQ(algorithm_run(A::rabenseifner, 1, 2), A::basic_linear);
  EXPECT_EQ(algorithm_run(A::rabenseifner, 2, 2), A::rabenseifner);
  // Segmented ring without a segment size is the ring, and falls back as the ring does.
  EXPECT_EQ(algorithm_run(A::segmented_ring, 1000, 4), A::ring);
  EXPECT_EQ(algorithm_run(A::segmented_ring, 2, 4), A::recursive_doubling);
  // With 256-element segments: the ring below 4 x 256 elements, segmented at and above.
  EXPECT_EQ(algorithm_run(A::segmented_ring, 1023, 4, 256), A::ring);
  EXPECT_EQ(algorithm_run(A::segmented_ring, 1024 * 8, 4, 256), A::segmented_ring);
  EXPECT_EQ(algorithm_run(A::recursive_doubling, 1, 4), A::recursive_doubling);
  // Names and Open MPI's ids go both ways.
  for (A a : {A::open_mpi_default, A::basic_linear, A::nonoverlapping, A::recursive_doubling, A::ring,
              A::segmented_ring, A::rabenseifner}) {
    EXPECT_EQ(parse_allreduce_algorithm(algorithm_name(a)), a);
    EXPECT_EQ(algorithm_from_open_mpi_id(open_mpi_algorithm_id(a)), a);
  }
  EXPECT_EQ(open_mpi_algorithm_id(A::ring), 4);
  EXPECT_EQ(open_mpi_algorithm_id(A::rabenseifner), 6);
  expect_error_containing([] { parse_allreduce_algorithm("tree"); }, "known: default");
  EXPECT_THROW(algorithm_from_open_mpi_id(7), Error);
}

// Open MPI 4.1's fixed decision for a commutative allreduce, just below and at its switch points
// (ompi_coll_tuned_allreduce_intra_dec_fixed), then what its fallbacks make of the choice.
TEST(CollectiveModel, OpenMpiDecisionTable) {
  using A = AllreduceAlgorithm;
  const auto choice = [](int ranks, double bytes) { return open_mpi_default_choice(ranks, bytes); };
  EXPECT_EQ(choice(2, 7), A::ring);
  EXPECT_EQ(choice(2, 8), A::recursive_doubling);
  EXPECT_EQ(choice(3, 4095), A::recursive_doubling);
  EXPECT_EQ(choice(3, 4096), A::ring);
  EXPECT_EQ(choice(2, 8192), A::recursive_doubling);
  EXPECT_EQ(choice(2, 16384), A::ring);
  EXPECT_EQ(choice(2, 65535), A::ring);
  EXPECT_EQ(choice(2, 65536), A::segmented_ring);
  EXPECT_EQ(choice(2, 262143), A::segmented_ring);
  EXPECT_EQ(choice(2, 262144), A::rabenseifner);
  EXPECT_EQ(choice(4, 15), A::ring);
  EXPECT_EQ(choice(4, 16), A::recursive_doubling);
  EXPECT_EQ(choice(7, 8191), A::recursive_doubling);
  EXPECT_EQ(choice(4, 8192), A::rabenseifner);
  EXPECT_EQ(choice(16, 63), A::segmented_ring);
  EXPECT_EQ(choice(16, 64), A::recursive_doubling);
  EXPECT_EQ(choice(31, 4096), A::rabenseifner);
  EXPECT_EQ(choice(100, 262143), A::recursive_doubling);
  EXPECT_EQ(choice(200, 131071), A::nonoverlapping);
  EXPECT_EQ(choice(5000, 20000), A::recursive_doubling);
  EXPECT_EQ(choice(5000, 40000), A::rabenseifner);
  // Run: one float on 2 ranks asks the ring, which needs a float per rank: recursive doubling.
  EXPECT_EQ(algorithm_run(A::open_mpi_default, 1, 2), A::recursive_doubling);
  // The table's segmented ring gets no segment size: the plain ring.
  EXPECT_EQ(algorithm_run(A::open_mpi_default, 16384, 2), A::ring);
  EXPECT_EQ(algorithm_run(A::open_mpi_default, 65536, 2), A::rabenseifner);
}

TEST(CollectiveModel, LinkCostInvertsTheFit) {
  // A ring at p = 4 measures A = 6a and B = 1.5b + 0.75g.
  const LinkCost link = link_cost_from_fit(AllreduceAlgorithm::ring, 4, 6e-5, 1.5e-9 + 0.75 * 2e-10, 2e-10);
  EXPECT_NEAR(link.alpha_s, 1e-5, 1e-15);
  EXPECT_NEAR(link.beta_s_per_byte, 1e-9, 1e-18);
  // Recursive doubling at p = 8: A = 3a, B = 3(b + g).
  const LinkCost rd = link_cost_from_fit(AllreduceAlgorithm::recursive_doubling, 8, 3e-5, 3.6e-9, 2e-10);
  EXPECT_NEAR(rd.alpha_s, 1e-5, 1e-15);
  EXPECT_NEAR(rd.beta_s_per_byte, 1e-9, 1e-18);
}

// A fit that inverts to no physical link is refused where it is made, naming the sizes to measure.
TEST(CollectiveModel, AnUnphysicalLinkIsRefusedWithTheSizesToMeasure) {
  EXPECT_EQ(unphysical_link_reason({1e-5, 1e-9}, 4, 1 << 20), "");
  EXPECT_EQ(unphysical_link_reason({0, 1e-9}, 65536, 1 << 20), "") << "a latency under the noise is 0";
  const std::string no_bytes = unphysical_link_reason({1e-5, -2e-11}, 4, 64);
  EXPECT_NE(no_bytes.find("-2e-11 s per byte over 4..64 bytes"), std::string::npos) << no_bytes;
  EXPECT_NE(no_bytes.find("(--max-bytes 1048576)"), std::string::npos) << no_bytes;
  EXPECT_NE(unphysical_link_reason({1e-5, 0}, 4, 64).find("--max-bytes"), std::string::npos);
  const std::string no_latency = unphysical_link_reason({-1e-6, 1e-9}, 65536, 1 << 20);
  EXPECT_NE(no_latency.find("-1e-06 s over 65536..1048576 bytes"), std::string::npos) << no_latency;
  EXPECT_NE(no_latency.find("(--min-bytes 8)"), std::string::npos) << no_latency;
  EXPECT_NE(unphysical_link_reason({1e-5, NAN}, 4, 64), "");
}

std::vector<SizeTime> synthetic(double alpha, double beta, double alpha_above, double beta_above,
                                double noise, unsigned seed) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<double> jitter(-noise, noise);
  std::vector<SizeTime> points;
  for (double n = 4; n <= 4 << 20; n *= 2) {
    const double t = n <= 65536 ? alpha + n * beta : alpha_above + n * beta_above;
    points.push_back({n, t * (1 + jitter(random))});
  }
  return points;
}

// With a rendezvous cost, each message above the eager limit pays it: by hand at p = 4.
TEST(CollectiveModel, RendezvousMessagesByHand) {
  CollectiveCost protocol({1e-5, 1e-9}, 0);
  protocol.rendezvous = LinkCost{1e-3, 2e-9};
  EXPECT_DOUBLE_EQ(protocol.message_seconds(65536), 1e-5 + 65536e-9);  // at the limit: eager
  EXPECT_DOUBLE_EQ(protocol.message_seconds(65537), 1e-3 + 2 * 65537e-9);
  // Ring, n = 1 MB: 6 messages of 250 kB, all rendezvous: 6(1e-3 + 5e-4).
  EXPECT_NEAR(allreduce_seconds(AllreduceAlgorithm::ring, 4, 1e6, protocol), 9e-3, 1e-15);
  // Ring, n = 200 kB: 6 messages of 50 kB, all eager: 6(1e-5 + 5e-5).
  EXPECT_NEAR(allreduce_seconds(AllreduceAlgorithm::ring, 4, 2e5, protocol), 3.6e-4, 1e-15);
  // Rabenseifner, n = 200 kB: two 100 kB messages (rendezvous), two of 50 kB (eager).
  EXPECT_NEAR(allreduce_seconds(AllreduceAlgorithm::rabenseifner, 4, 2e5, protocol),
              2 * (1e-3 + 2e-4) + 2 * (1e-5 + 5e-5), 1e-15);
  // Recursive doubling, n = 200 kB: two whole-vector messages, rendezvous.
  EXPECT_NEAR(allreduce_seconds(AllreduceAlgorithm::recursive_doubling, 4, 2e5, protocol),
              2 * (1e-3 + 4e-4), 1e-15);
  // Without a rendezvous cost the same sums are the one-link formulas.
  const CollectiveCost one_link({1e-5, 1e-9}, 0);
  EXPECT_NEAR(allreduce_seconds(AllreduceAlgorithm::rabenseifner, 4, 2e5, one_link),
              4 * 1e-5 + 1.5 * 2e5 * 1e-9, 1e-15);
}

// The exchange curve by hand through (1e3, 1 ms), (2e3, 3 ms), (4e3, 4 ms), given out of order:
// a line between neighbours, the end lines past the ends, never below 0; bad points refused.
TEST(CollectiveModel, ExchangeCurveInterpolatesAndExtendsByHand) {
  const ExchangeCurve curve({{4000, 4e-3}, {1000, 1e-3}, {2000, 3e-3}});
  EXPECT_DOUBLE_EQ(curve.seconds(1000), 1e-3);
  EXPECT_DOUBLE_EQ(curve.seconds(2000), 3e-3);
  EXPECT_DOUBLE_EQ(curve.seconds(4000), 4e-3);
  EXPECT_NEAR(curve.seconds(1500), 2e-3, 1e-15);   // slope 2 us/byte
  EXPECT_NEAR(curve.seconds(3000), 3.5e-3, 1e-15);  // slope 0.5 us/byte
  EXPECT_NEAR(curve.seconds(8000), 6e-3, 1e-15);    // past the end on the last segment's line
  EXPECT_NEAR(curve.seconds(750), 5e-4, 1e-15);     // before the start on the first segment's line
  EXPECT_EQ(curve.seconds(200), 0.0);               // that line is at -0.6 ms there
  const ExchangeCurve two({{1000, 1e-3}, {2000, 3e-3}});
  EXPECT_NEAR(two.seconds(10000), 1.9e-2, 1e-15);
  expect_error_containing([] { ExchangeCurve({{1000, 1e-3}}); }, "needs at least 2 sizes, got 1");
  expect_error_containing([] { ExchangeCurve({{1000, 1e-3}, {1000, 2e-3}}); }, "measured twice");
  expect_error_containing([] { ExchangeCurve({{1000, 1e-3}, {2000, -1e-3}}); }, "times finite and not negative");
  expect_error_containing([] { ExchangeCurve({{0, 1e-3}, {2000, 1e-3}}); }, "sizes must be positive");
}

// With an exchange curve, recursive doubling's and Rabenseifner's pairwise rounds cost the
// curve, their fold-in and fold-out for a non-power of two and the ring keep the link: by hand
// at the test link (alpha 10 us, beta 1 ns/byte, gamma 0.2 ns/byte) and n = 1 MB.
TEST(CollectiveModel, PairwiseRoundsCostTheExchangeCurveByHand) {
  using A = AllreduceAlgorithm;
  CollectiveCost exchanged = cost;
  exchanged.exchange = ExchangeCurve({{1e5, 0.5e-3}, {2.5e5, 1e-3}, {5e5, 2e-3}, {1e6, 5e-3}});
  const double n = 1e6;
  // p = 4: two exchanges of 1 MB, 2 x 5e-3 + 2 x 1e6 x 2e-10.
  EXPECT_NEAR(allreduce_seconds(A::recursive_doubling, 4, n, exchanged), 1.04e-2, 1e-12);
  // p = 4: halves of 500 kB and 250 kB exchanged twice, 2 (2e-3 + 1e-3) + 0.75 x 1e6 x 2e-10.
  EXPECT_NEAR(allreduce_seconds(A::rabenseifner, 4, n, exchanged), 6.15e-3, 1e-12);
  // p = 6: the p' = 4 rounds, plus the whole vector in and out one way, 2 (1e-5 + 1e-3), and one
  // reduction more: 1e-2 + 2.02e-3 + 3 x 2e-4.
  EXPECT_NEAR(allreduce_seconds(A::recursive_doubling, 6, n, exchanged), 1.262e-2, 1e-12);
  // p = 6: 6.15e-3, the halves folded in one way, 2 (1e-5 + 5e-4) + 0.5 x 1e6 x 2e-10, the
  // result sent back, 1e-5 + 1e-3.
  EXPECT_NEAR(allreduce_seconds(A::rabenseifner, 6, n, exchanged), 8.28e-3, 1e-12);
  // The ring sends one way on each link: the curve does not price it.
  for (int p : {2, 4, 6}) {
    EXPECT_EQ(allreduce_seconds(A::ring, p, n, exchanged), allreduce_seconds(A::ring, p, n, cost));
  }
  // Without a curve an exchange is one message: the one-link formulas of CostsByHand.
  EXPECT_DOUBLE_EQ(cost.exchange_seconds(n), cost.message_seconds(n));
  EXPECT_NEAR(allreduce_seconds(A::recursive_doubling, 4, n, cost), 2.42e-3, 1e-12);
  EXPECT_NEAR(allreduce_seconds(A::rabenseifner, 6, n, cost), 3.82e-3, 1e-12);
}

// Allreduces of three algorithms made up from a known eager and rendezvous link: the joint fit
// gives the link back, and refuses sizes that leave one protocol without two.
TEST(CollectiveModel, ProtocolFitRecoversAKnownLink) {
  using A = AllreduceAlgorithm;
  CollectiveCost truth({3e-5, 8e-9}, 2e-11);
  truth.rendezvous = LinkCost{2e-4, 1.3e-8};
  std::vector<AlgorithmTime> times;
  for (A a : {A::ring, A::recursive_doubling, A::rabenseifner}) {
    for (double n = 4096; n <= 4 << 20; n *= 2) times.push_back({a, 4, n, allreduce_seconds(a, 4, n, truth)});
  }
  const ProtocolFit fit = fit_protocol(times, 2e-11);
  EXPECT_NEAR(fit.cost.link.alpha_s, 3e-5, 3e-5 * 1e-6);
  EXPECT_NEAR(fit.cost.link.beta_s_per_byte, 8e-9, 8e-9 * 1e-6);
  ASSERT_TRUE(fit.cost.rendezvous.has_value());
  EXPECT_NEAR(fit.cost.rendezvous->alpha_s, 2e-4, 2e-4 * 1e-6);
  EXPECT_NEAR(fit.cost.rendezvous->beta_s_per_byte, 1.3e-8, 1.3e-8 * 1e-6);
  EXPECT_FALSE(fit.constrained);
  EXPECT_LT(fit.rms_relative_residual, 1e-9);
  // Times that put the rendezvous alpha below 0 (-20 us): held at 0, and said so.
  for (AlgorithmTime& t : times) {
    CollectiveCost below = truth;
    below.rendezvous = LinkCost{-2e-5, 1.3e-8};
    t.seconds = allreduce_seconds(t.algorithm, 4, t.bytes, below);
  }
  const ProtocolFit held = fit_protocol(times, 2e-11);
  EXPECT_TRUE(held.constrained);
  EXPECT_EQ(held.cost.rendezvous->alpha_s, 0.0);
  EXPECT_GE(held.cost.link.alpha_s, 0.0);
  // Only eager messages: no rendezvous term to fit.
  const std::vector<AlgorithmTime> small = {{A::ring, 4, 4096, 1e-4}, {A::ring, 4, 8192, 2e-4},
                                            {A::ring, 4, 16384, 3e-4}};
  expect_error_containing([&] { fit_protocol(small, 0); }, "above it at 2 sizes or more; got 3 and 0");
}

TEST(CollectiveModel, FitRecoversAKnownLine) {
  const auto exact = synthetic(5e-5, 1e-8, 5e-5, 1e-8, 0, 1);
  AllreduceFit fit = fit_allreduce(exact);
  EXPECT_NEAR(fit.line.alpha_s, 5e-5, 5e-5 * 1e-9);
  EXPECT_NEAR(fit.line.beta_s_per_byte, 1e-8, 1e-8 * 1e-9);
  EXPECT_EQ(fit.pieces.size(), 1u);
  EXPECT_LT(fit.rms_relative_residual, 1e-12);

  // +-5% uniform noise: relative weights keep alpha (from the small sizes) and beta (the large).
  const auto noisy = synthetic(5e-5, 1e-8, 5e-5, 1e-8, 0.05, 7);
  fit = fit_allreduce(noisy);
  EXPECT_NEAR(fit.line.alpha_s, 5e-5, 5e-5 * 0.05);
  EXPECT_NEAR(fit.line.beta_s_per_byte, 1e-8, 1e-8 * 0.05);
  EXPECT_EQ(fit.pieces.size(), 1u) << "noise alone should not buy a second piece";
  // The residuals are the model's against each point, and their RMS is what is reported.
  ASSERT_EQ(fit.relative_residuals.size(), noisy.size());
  double squares = 0;
  for (std::size_t i = 0; i < noisy.size(); ++i) {
    const double model = fit.line.alpha_s + noisy[i].bytes * fit.line.beta_s_per_byte;
    EXPECT_NEAR(fit.relative_residuals[i], (model - noisy[i].seconds) / noisy[i].seconds, 1e-12);
    squares += fit.relative_residuals[i] * fit.relative_residuals[i];
  }
  EXPECT_NEAR(fit.rms_relative_residual, std::sqrt(squares / static_cast<double>(noisy.size())), 1e-12);
  EXPECT_GT(fit.rms_relative_residual, 0.005);
}

TEST(CollectiveModel, FitHoldsANegativeTermAtZero) {
  // t = 1e-9 n - 1e-6 (a line whose intercept is negative): the free fit's alpha is -1e-6, so
  // alpha is held at 0 and beta is the weighted fit through the origin, sum(w n t) / sum(w n^2)
  // with w = 1/t^2: with r = n/t, sum(r) / sum(r^2).
  std::vector<SizeTime> points;
  double sum_r = 0, sum_r2 = 0;
  for (double n : {4096.0, 16384.0, 65536.0, 262144.0}) {
    const double t = 1e-9 * n - 1e-6;
    points.push_back({n, t});
    sum_r += n / t;
    sum_r2 += (n / t) * (n / t);
  }
  const double through_origin = sum_r / sum_r2;
  const AllreduceFit fit = fit_allreduce(points);
  EXPECT_TRUE(fit.line.constrained);
  EXPECT_EQ(fit.line.alpha_s, 0.0);
  EXPECT_NEAR(fit.line.beta_s_per_byte, through_origin, 1e-12 * through_origin);
  EXPECT_FALSE(fit_allreduce(synthetic(5e-5, 1e-8, 5e-5, 1e-8, 0, 1)).line.constrained);
}

TEST(CollectiveModel, FitFindsTheEagerLimitKink) {
  // Eager below 64 KiB (20 us, 2 ns/B), rendezvous above (200 us, 10 ns/B), +-2% noise.
  const auto points = synthetic(2e-5, 2e-9, 2e-4, 1e-8, 0.02, 3);
  const AllreduceFit fit = fit_allreduce(points);
  ASSERT_EQ(fit.pieces.size(), 2u);
  EXPECT_EQ(fit.pieces[0].to_bytes, 65536);
  EXPECT_NEAR(fit.pieces[0].alpha_s, 2e-5, 2e-5 * 0.05);
  EXPECT_NEAR(fit.pieces[0].beta_s_per_byte, 2e-9, 2e-9 * 0.2);
  EXPECT_NEAR(fit.pieces[1].alpha_s, 2e-4, 2e-4 * 0.2);
  EXPECT_NEAR(fit.pieces[1].beta_s_per_byte, 1e-8, 1e-8 * 0.05);
  EXPECT_LT(fit.rms_relative_residual, 0.03);
  EXPECT_GT(fit.line_rms_relative_residual, 2 * fit.rms_relative_residual);
  // Evaluation uses the piece a size falls in.
  EXPECT_NEAR(fit.seconds(1 << 20), fit.pieces[1].alpha_s + (1 << 20) * fit.pieces[1].beta_s_per_byte, 1e-15);
}

TEST(CollectiveModel, FitLeavesOutTheTbfBurstAndRefusesTooFewSizes) {
  EXPECT_EQ(tbf_burst_bytes(1e8), 67000);   // 4 ms at 100 Mbit/s is 50,000 bytes
  EXPECT_EQ(tbf_burst_bytes(1e9), 500000);  // 4 ms at 1 Gbit/s
  const auto points = synthetic(5e-5, 1e-8, 5e-5, 1e-8, 0, 1);
  FitOptions options;
  options.link_rate_bits_per_s = 1e9;
  const AllreduceFit fit = fit_allreduce(points, options);
  std::size_t inside = 0;
  for (const SizeTime& p : points) inside += p.bytes <= 500000 ? 1 : 0;
  EXPECT_EQ(fit.excluded_bytes.size(), inside);
  EXPECT_EQ(fit.used.size(), points.size() - inside);  // 512 KiB .. 4 MiB
  EXPECT_EQ(fit.used.front().bytes, 524288);

  const std::vector<SizeTime> two{{4, 1e-5}, {8, 1.1e-5}};
  expect_error_containing([&] { fit_allreduce(two); }, "2 message size(s) to fit");
  options.link_rate_bits_per_s = 1e10;  // burst 5 MB: every size inside
  expect_error_containing([&] { fit_allreduce(points, options); }, "inside the link's tbf burst");
  EXPECT_THROW(fit_allreduce(std::vector<SizeTime>{{4, 1e-5}, {8, 0}, {16, 1e-5}}), Error);
}

TEST(CollectiveModel, TcRates) {
  EXPECT_EQ(parse_tc_rate("1gbit"), 1e9);
  EXPECT_EQ(parse_tc_rate("100mbit"), 1e8);
  EXPECT_EQ(parse_tc_rate("500kbit"), 5e5);
  EXPECT_EQ(parse_tc_rate("1mbps"), 8e6);
  EXPECT_EQ(parse_tc_rate("fast"), std::nullopt);
  EXPECT_EQ(parse_tc_rate("10parsecs"), std::nullopt);
}

// The fabric of the step predictions: `nodes` nodes of one rank each over `network`.
HierarchicalFabric nodes_over(int nodes, const CollectiveCost& network) {
  HierarchicalFabric fabric;
  fabric.nodes = nodes;
  fabric.network = network;
  return fabric;
}

TEST(CollectiveModel, StepPredictionByHand) {
  StepModel model{.serial_step_s = 0.1, .bucket_bytes = {1e6}, .hidden_fraction = 0.5};
  const HierarchicalFabric fabric = nodes_over(4, cost);
  // p = 4, 1 MB: Rabenseifner, 1.69e-3 s, half of it hidden.
  StepPrediction strong = predict_step(model, Scaling::strong, fabric);
  EXPECT_EQ(strong.algorithm, "rabenseifner");
  EXPECT_NEAR(strong.compute_s, 0.025, 1e-15);
  EXPECT_NEAR(strong.exposed_s, 0.845e-3, 1e-15);
  EXPECT_NEAR(strong.step_s, 0.025845, 1e-12);
  EXPECT_NEAR(strong.efficiency, 0.1 / (4 * 0.025845), 1e-12);
  StepPrediction weak = predict_step(model, Scaling::weak, fabric);
  EXPECT_NEAR(weak.step_s, 0.100845, 1e-12);
  EXPECT_NEAR(weak.efficiency, 0.1 / 0.100845, 1e-12);
  model.hidden_fraction = 1.5;
  EXPECT_THROW(predict_step(model, Scaling::strong, fabric), Error);
}

// A run that let Open MPI choose is priced by what it ran, not by the cheapest: at p = 2 and
// 50 kB its table runs the ring, 2e-5 + 5e-5 + 5e-6, where recursive doubling would take
// 1e-5 + 5e-5 + 1e-5.
TEST(CollectiveModel, StepPredictionByOpenMpisChoice) {
  StepModel model{.serial_step_s = 0.01, .bucket_bytes = {5e4}};
  const HierarchicalFabric fabric = nodes_over(2, cost);
  const StepPrediction cheapest = predict_step(model, Scaling::strong, fabric);
  EXPECT_EQ(cheapest.algorithm, "recursive_doubling");
  EXPECT_NEAR(cheapest.communication_s, 7e-5, 1e-15);
  model.rule = AllreduceRule::open_mpi_default;
  const StepPrediction open_mpi = predict_step(model, Scaling::strong, fabric);
  EXPECT_EQ(open_mpi.algorithm, "ring");
  EXPECT_NEAR(open_mpi.communication_s, 7.5e-5, 1e-15);
  EXPECT_NEAR(open_mpi.step_s, 0.005 + 7.5e-5, 1e-15);
}

// Over a token bucket the step is simulated: 2 nodes exchange one 100 kB bucket (recursive
// doubling, the cheapest at p = 2) after 10 ms of compute, long enough to refill either bucket.
TEST(CollectiveModel, StepOverATokenBucketIsSimulated) {
  StepModel model{.serial_step_s = 0.02, .bucket_bytes = {1e5}};
  HierarchicalFabric fabric = nodes_over(2, {{1, 1}, 0});  // the capped cost is not what prices a shaped step
  const double alpha = 1e-5, speed = 1e9, n = 1e5, wire = 1514.0 / 1448.0;
  fabric.uncapped = CollectiveCost{{alpha, 1 / speed}, 0};
  // Burst 500 kB at 125 MB/s: the 100 kB pass at the link's own speed.
  fabric.token_bucket = TokenBucket{5e5, 1.25e8};
  StepPrediction p = predict_step(model, Scaling::strong, fabric);
  EXPECT_TRUE(p.simulated);
  EXPECT_EQ(p.algorithm, "recursive_doubling");
  EXPECT_NEAR(p.step_s, 0.01 + alpha + n / speed, 1e-12);
  // Burst 67 kB at 12.5 MB/s: the bucket empties after (67000 - 1514) / (speed x wire - rate)
  // seconds at full speed; the rest of the message goes at the rate.
  const double burst = 67000, rate = 1.25e7;
  fabric.token_bucket = TokenBucket{burst, rate};
  p = predict_step(model, Scaling::strong, fabric);
  const double fast = (burst - 1514) / (speed * wire - rate);
  EXPECT_NEAR(p.communication_s, alpha + fast + (n - speed * fast) * wire / rate, 1e-9);
  // Half of it hidden behind backward: half of it on the step.
  model.hidden_fraction = 0.5;
  const StepPrediction hidden = predict_step(model, Scaling::strong, fabric);
  EXPECT_NEAR(hidden.step_s, 0.01 + 0.5 * p.communication_s, 1e-12);
}

// The update every node runs over all parameters is not divided by the nodes, and ranks that share
// a machine's cores compute slower by the share they get.
TEST(CollectiveModel, StepPredictionReplicatedWorkAndCoreShare) {
  StepModel model{.serial_step_s = 0.1, .bucket_bytes = {1e6}, .hidden_fraction = 0.5};
  model.replicated_s = 0.02;
  const HierarchicalFabric fabric = nodes_over(4, cost);
  StepPrediction strong = predict_step(model, Scaling::strong, fabric);
  EXPECT_NEAR(strong.compute_s, 0.08 / 4 + 0.02, 1e-15);
  EXPECT_NEAR(strong.step_s, 0.04 + 0.845e-3, 1e-12);
  EXPECT_NEAR(predict_step(model, Scaling::weak, fabric).compute_s, 0.1, 1e-15);
  model.core_share = 0.5;  // 4 ranks on 2 cores
  strong = predict_step(model, Scaling::strong, fabric);
  EXPECT_NEAR(strong.compute_s, 0.08, 1e-15);
  EXPECT_NEAR(strong.step_s, 0.08 + 0.845e-3, 1e-12);
  EXPECT_NEAR(strong.efficiency, 0.1 / (4 * strong.step_s), 1e-12);
  model.core_share = 0;
  EXPECT_THROW(predict_step(model, Scaling::strong, fabric), Error);
  model.core_share = 1;
  model.replicated_s = 0.1;
  EXPECT_THROW(predict_step(model, Scaling::strong, fabric), Error);
}

TEST(CollectiveModel, NodesBelowHalfEfficiency) {
  // 10 ms serial step, one 1 MB bucket, nothing hidden, alpha 10 us, beta 1 ns/B, no gamma.
  // Strong efficiency is 0.01 / (0.01 + p c(p)), below 1/2 once p c(p) > 0.01; the cheapest
  // c(p): p = 5 ring 8e-5 + 1.6e-3 -> 8.4e-3; p = 6 ring 1e-4 + 1.667e-3 -> 1.06e-2.
  const StepModel model{.serial_step_s = 0.01, .bucket_bytes = {1e6}};
  const HierarchicalFabric fabric = nodes_over(1, {{1e-5, 1e-9}, 0});
  EXPECT_EQ(nodes_below_half_efficiency(model, Scaling::strong, fabric, 64), 6);
  EXPECT_EQ(nodes_below_half_efficiency(model, Scaling::strong, fabric, 5), std::nullopt);
  // Weak: c(p) would have to pass 0.01 s; Rabenseifner's stays near 2nb = 2 ms (+ 3 ms for a
  // non-power of two) up to 1000 nodes.
  EXPECT_EQ(nodes_below_half_efficiency(model, Scaling::weak, fabric, 1000), std::nullopt);
}

// `cnnbench scaling-model` end to end on a made-up profile: LeNet-5's two buckets (10,288 and
// 236,536 bytes) priced by hand at 4 nodes.
TEST(ScalingModelCli, StrongAndWeakStepsByHand) {
  test::TempDir dir;
  const std::string profiles = (dir.path() / "profiles.json").string();
  std::ofstream(profiles) << R"({"profiles": [{"name": "made-up", "network":
      {"alpha_s": 1e-5, "beta_s_per_byte": 1e-9, "gamma_s_per_byte": 0}}]})";
  const std::string out = (dir.path() / "out.json").string();
  const test::CliResult r = test::run_cli("scaling-model --fabric " + profiles +
                                          " --model lenet5 --serial-step 0.01 --max-nodes 8 --report " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json result = nlohmann::json::parse(read_file(out));
  EXPECT_EQ(result.at("bucket_bytes"), nlohmann::json::parse("[10288.0, 236536.0]"));
  // p = 4: 10,288 B by recursive doubling 2(1e-5 + 10288e-9) = 4.0576e-5 s (Rabenseifner
  // 5.5432e-5); 236,536 B by Rabenseifner 4e-5 + 1.5 x 236536e-9 = 3.94804e-4 s.
  const double communication = 4.0576e-5 + 3.94804e-4;
  const nlohmann::json& profile = result.at("profiles").at(0);
  bool found = false;
  for (const auto& point : profile.at("strong")) {
    if (point.at("nodes") != 4) continue;
    found = true;
    EXPECT_NEAR(point.at("step_s").get<double>(), 0.0025 + communication, 1e-12);
    EXPECT_NEAR(point.at("efficiency").get<double>(), 0.01 / (4 * (0.0025 + communication)), 1e-9);
    EXPECT_EQ(point.at("algorithm"), "rabenseifner");
  }
  EXPECT_TRUE(found) << profile.at("strong");
  for (const auto& point : profile.at("weak")) {
    if (point.at("nodes") == 4) {
      EXPECT_NEAR(point.at("step_s").get<double>(), 0.01 + communication, 1e-12);
    }
  }
  const std::string not_profiles = (dir.path() / "not_profiles.json").string();
  std::ofstream(not_profiles) << R"({"x": 1})";
  const test::CliResult bad = test::run_cli("scaling-model --fabric " + not_profiles + " --serial-step 0.01");
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_NE(bad.output.find("\"profiles\" array"), std::string::npos) << bad.output;
  // The files it reads are inputs: --report over one of them, by any spelling, is refused before
  // any work and leaves it as it was.
  const std::string before = read_file(profiles);
  const std::string dot = (dir.path() / "." / "profiles.json").string();
  for (const std::string& flags : {"--fabric " + profiles + " --report " + dot,
                                   "--fabric " + profiles + " --check-run " + out + " --report " + out}) {
    const test::CliResult over = test::run_cli("scaling-model " + flags + " --serial-step 0.01");
    EXPECT_EQ(over.code, 1) << flags << ": " << over.output;
    EXPECT_NE(over.output.find("which this command reads"), std::string::npos) << over.output;
  }
  EXPECT_EQ(read_file(profiles), before);
}

PointRecord measured_point(const std::string& id, const std::string& strategy, int nodes, double median_s) {
  PointRecord p;
  p.id = id;
  p.model = "lenet5";
  p.strategy = strategy;
  p.nodes = nodes;
  p.p = nodes;
  p.time.median = median_s;
  p.steps = 100;
  return p;
}

// A sweep's cluster point gets the model's step next to its own: LeNet-5's two buckets at 4
// nodes (4.35380e-4 s of allreduce, as above), half of it hidden, 8 ms serial step.
// A profile's rendezvous cost prices its long messages; --protocol-fit refuses reports of two
// fabrics.
TEST(ScalingModelCli, RendezvousProfilesAndProtocolFitAcrossFabrics) {
  test::TempDir dir;
  const std::string profiles = (dir.path() / "profiles.json").string();
  std::ofstream(profiles) << R"({"profiles": [{"name": "made-up", "network":
      {"alpha_s": 1e-5, "beta_s_per_byte": 1e-9, "gamma_s_per_byte": 0},
      "rendezvous": {"alpha_s": 1e-3, "beta_s_per_byte": 2e-9},
      "eager_limit_bytes": 65536}]})";
  const std::string out = (dir.path() / "out.json").string();
  const test::CliResult r = test::run_cli("scaling-model --fabric " + profiles +
                                          " --model lenet5 --serial-step 0.01 --max-nodes 8 --report " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json result = nlohmann::json::parse(read_file(out));
  bool found = false;
  for (const auto& row : result.at("profiles").at(0).at("allreduce_seconds")) {
    if (row.at("ranks") != 4 || row.at("bytes") != 1048576.0) continue;
    found = true;
    // The ring's six 256 KiB messages, all rendezvous.
    EXPECT_NEAR(row.at("ring").get<double>(), 6 * (1e-3 + 262144 * 2e-9), 1e-12);
  }
  EXPECT_TRUE(found);
  // Two allreduce-bench reports, one over a 1gbit link, one uncapped.
  const auto report = [&](const std::string& name, const char* rate) {
    const std::string path = (dir.path() / name).string();
    nlohmann::json bench = {{"ranks", 4},
                            {"network", {{"transport", "tcp"}, {"link_rate", rate ? nlohmann::json(rate) : nlohmann::json()}}},
                            {"reduction", {{"gamma_s_per_byte", 0.0}}},
                            {"fit", {{"link", {{"alpha_s", 1e-5}, {"beta_s_per_byte", 1e-9}, {"gamma_s_per_byte", 0.0}}}}},
                            {"sizes", nlohmann::json::array()}};
    for (double n = 4096; n <= 1 << 20; n *= 2) {
      bench["sizes"].push_back({{"bytes", n}, {"algorithm_run", "ring"}, {"seconds", 1e-4 + n * 1e-9}});
    }
    std::ofstream(path) << bench.dump();
    return path;
  };
  const test::CliResult mixed = test::run_cli("scaling-model --allreduce " + report("a.json", "1gbit") +
                                              " --allreduce " + report("b.json", nullptr) +
                                              " --protocol-fit --serial-step 0.01");
  EXPECT_EQ(mixed.code, 1) << mixed.output;
  EXPECT_NE(mixed.output.find("was measured over tcp uncapped, the reports before it over tcp 1gbit"),
            std::string::npos) << mixed.output;
}

// --exchange gives the --allreduce profiles a measured exchange curve, which prices recursive
// doubling's and Rabenseifner's rounds by hand; the profile carries it into a fabric file that
// reads back the same; reports of another fabric or of the wrong kind are refused.
TEST(ScalingModelCli, ExchangeCurvePricesThePairwiseRounds) {
  test::TempDir dir;
  const auto write = [&](const std::string& name, const nlohmann::json& content) {
    const std::string path = (dir.path() / name).string();
    std::ofstream(path) << content.dump();
    return path;
  };
  const auto network = [](const char* rate) { return nlohmann::json{{"transport", "tcp"}, {"link_rate", rate}}; };
  const std::string bench = write(
      "bench.json", {{"ranks", 4},
                     {"exchange", false},
                     {"network", network("1gbit")},
                     {"fit", {{"link", {{"alpha_s", 1e-5}, {"beta_s_per_byte", 1e-9}, {"gamma_s_per_byte", 0.0}}}}}});
  const auto exchange = [&](const std::string& name, const char* rate) {
    return write(name, {{"ranks", 4},
                        {"exchange", true},
                        {"network", network(rate)},
                        {"fit", nullptr},
                        {"sizes", {{{"bytes", 262144}, {"seconds", 4e-3}},
                                   {{"bytes", 524288}, {"seconds", 8e-3}},
                                   {{"bytes", 1048576}, {"seconds", 2e-2}}}}});
  };
  const std::string out = (dir.path() / "out.json").string();
  // --force: each call replaces the report of the one before.
  const std::string common = " --model lenet5 --serial-step 0.01 --max-nodes 8 --force --report " + out;
  const auto row_at_1mib = [&](const std::string& args) {
    const test::CliResult r = test::run_cli("scaling-model " + args + common);
    EXPECT_EQ(r.code, 0) << r.output;
    const nlohmann::json result = nlohmann::json::parse(read_file(out));
    for (const auto& row : result.at("profiles").back().at("allreduce_seconds")) {
      if (row.at("ranks") == 4 && row.at("bytes") == 1048576.0) return std::pair{result.at("profiles").back(), row};
    }
    ADD_FAILURE() << "no row of 4 ranks, 1 MiB";
    return std::pair{nlohmann::json(), nlohmann::json()};
  };
  const auto [profile, row] = row_at_1mib("--allreduce " + bench + " --exchange " + exchange("x.json", "1gbit"));
  EXPECT_NEAR(row.at("recursive_doubling").get<double>(), 2 * 2e-2, 1e-15);       // two 1 MiB rounds
  EXPECT_NEAR(row.at("rabenseifner").get<double>(), 2 * (8e-3 + 4e-3), 1e-15);  // 512 and 256 KiB, twice
  EXPECT_NEAR(row.at("ring").get<double>(), 6 * (1e-5 + 262144e-9), 1e-15);     // the link's
  ASSERT_TRUE(profile.contains("exchange"));
  EXPECT_EQ(profile.at("exchange").at("ranks"), 4);
  const std::string fabric = write("fabric.json", {{"profiles", nlohmann::json::array({profile})}});
  const auto [again, same] = row_at_1mib("--fabric " + fabric);
  EXPECT_EQ(again.at("exchange"), profile.at("exchange"));
  EXPECT_NEAR(same.at("recursive_doubling").get<double>(), 2 * 2e-2, 1e-15);

  const auto refused = [&](const std::string& args, const std::string& part) {
    const test::CliResult r = test::run_cli("scaling-model " + args + " --serial-step 0.01");
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find(part), std::string::npos) << r.output;
  };
  refused("--allreduce " + bench + " --exchange " + exchange("y.json", "100mbit"),
          "was measured over tcp 100mbit, the profile " + bench + " over tcp 1gbit");
  refused("--allreduce " + bench + " --exchange " + bench, "not an allreduce-bench --exchange report");
  refused("--fabric " + fabric + " --exchange " + exchange("x.json", "1gbit"), "pass at least one --allreduce");
  refused("--allreduce " + exchange("x.json", "1gbit"), "an exchange report (allreduce-bench --exchange)");
  nlohmann::json one_size = {{"profiles", nlohmann::json::array({profile})}};
  nlohmann::json& sizes = one_size["profiles"][0]["exchange"]["sizes"];
  sizes.erase(2);
  sizes.erase(1);
  refused("--fabric " + write("one.json", one_size), "profiles[0].exchange: exchange curve: needs at least 2 sizes");
}

TEST(ClusterPrediction, SweepPointsCarryThePredictionByHand) {
  SweepRecord sweep;
  sweep.allreduce = nlohmann::json::parse(
      R"({"ranks": 4, "fit": {"alpha_s": 1, "beta_s_per_byte": 1,
          "link": {"alpha_s": 1e-5, "beta_s_per_byte": 1e-9, "gamma_s_per_byte": 0}}})");
  sweep.points.push_back(measured_point("lenet5/serial/n1c1", "serial", 1, 0.8));
  PointRecord cluster = measured_point("lenet5/cluster/n4c1", "cluster", 4, 0.4);
  cluster.strategy_metrics = nlohmann::json::parse(
      R"({"overlap_active": true, "overlap_detail": {"hidden_fraction": 0.5},
          "allreduce": {"schedule_bytes": [10288, 236536]}})");
  sweep.points.push_back(cluster);
  PointRecord two_threads = measured_point("lenet5/cluster/n4c2", "cluster", 4, 0.4);
  two_threads.cores = 2;
  sweep.points.push_back(two_threads);
  add_cluster_predictions(sweep);
  const nlohmann::json& prediction = sweep.points[1].prediction;
  ASSERT_TRUE(prediction.is_object());
  // The cluster strategy's in-place MPI_Iallreduce runs libnbc's binomial schedule: up two
  // rounds, then the root sends to ranks 1 and 2 at once over its link, then 1 sends to 3:
  // 4 alphas and 5 n betas per bucket.
  const double predicted = 0.008 / 4 + 0.5 * (4e-5 + 5 * 10288e-9 + 4e-5 + 5 * 236536e-9);
  EXPECT_NEAR(prediction.at("predicted_step_s").get<double>(), predicted, 1e-12);
  EXPECT_NEAR(prediction.at("measured_step_s").get<double>(), 0.004, 1e-15);
  EXPECT_NEAR(prediction.at("relative_error").get<double>(), (predicted - 0.004) / 0.004, 1e-9);
  EXPECT_EQ(prediction.at("algorithm"), "binomial");
  EXPECT_EQ(prediction.at("algorithm_rule"), "open_mpi_iallreduce_in_place");
  EXPECT_TRUE(sweep.points[0].prediction.is_null()) << "serial points are not predicted";
  EXPECT_TRUE(sweep.points[2].prediction.is_null()) << "the model has one thread per rank";
  // The field survives the report's round trip.
  const SweepRecord back = nlohmann::json(sweep).get<SweepRecord>();
  EXPECT_EQ(back.points[1].prediction, prediction);

  // A run whose libnbc was asked for the ring (coll_libnbc_iallreduce_algorithm 1) is priced by
  // it: 6 messages of n/4 per bucket.
  sweep.points[1].strategy_metrics["allreduce"]["iallreduce_algorithm_id"] = 1;
  add_cluster_predictions(sweep);
  EXPECT_EQ(sweep.points[1].prediction.at("algorithm"), "ring");
  EXPECT_NEAR(sweep.points[1].prediction.at("predicted_step_s").get<double>(),
              0.002 + 0.5 * (6e-5 + 6 * 10288e-9 / 4 + 6e-5 + 6 * 236536e-9 / 4), 1e-12);
  // In shared memory the rank's own core copies and sums the allreduce: nothing of it is hidden,
  // whatever the run measured in flight, and ranks beyond the machine's cores share them. The
  // serial step's update (1 ms of its 8) is every rank's whole.
  sweep.points[1].strategy_metrics["network"] = {{"transport", "shm"}};
  sweep.context["cores"] = 2;
  sweep.points[0].time_breakdown = {{"steps", 100}, {"update_s", 0.1}};
  add_cluster_predictions(sweep);
  const nlohmann::json& shm = sweep.points[1].prediction;
  EXPECT_EQ(shm.at("hidden_fraction"), 0.0);
  EXPECT_EQ(shm.at("hidden_rule"), "shared memory: none hidden");
  EXPECT_NEAR(shm.at("core_share").get<double>(), 0.5, 1e-15);
  EXPECT_NEAR(shm.at("replicated_s").get<double>(), 0.001, 1e-15);
  EXPECT_NEAR(shm.at("compute_s").get<double>(), (0.007 / 4 + 0.001) / 0.5, 1e-12);
  EXPECT_NEAR(shm.at("predicted_step_s").get<double>(),
              0.0055 + (6e-5 + 6 * 10288e-9 / 4 + 6e-5 + 6 * 236536e-9 / 4), 1e-12);
  // --rank-update sharded: each rank steps its 1/4 of the model, so the whole serial step divides.
  sweep.points[1].strategy_metrics["rank-update"] = "sharded";
  add_cluster_predictions(sweep);
  EXPECT_EQ(sweep.points[1].prediction.at("replicated_s"), 0.0);
  EXPECT_NEAR(sweep.points[1].prediction.at("compute_s").get<double>(), (0.008 / 4) / 0.5, 1e-12);
  sweep.points[1].strategy_metrics.erase("rank-update");
  // Over TCP between hosts of their own the measured hidden share holds and each rank has its
  // cores; emulated hosts are one machine's, so its cores are shared again.
  sweep.points[1].strategy_metrics["network"] = {{"transport", "tcp"}};
  add_cluster_predictions(sweep);
  EXPECT_EQ(sweep.points[1].prediction.at("hidden_fraction"), 0.5);
  EXPECT_EQ(sweep.points[1].prediction.at("core_share"), 1.0);
  sweep.config["network"] = {{"emulated_hosts", 4}};
  add_cluster_predictions(sweep);
  EXPECT_NEAR(sweep.points[1].prediction.at("core_share").get<double>(), 0.5, 1e-15);
  EXPECT_EQ(sweep.points[1].prediction.at("token_bucket_bytes"), 0.0) << "an uncapped link has no bucket";
  EXPECT_EQ(sweep.points[1].prediction.at("communication_from"), "link fit");
  // A bench of the point's own call (in-place MPI_Iallreduce on the ring, 4 ranks) prices the
  // buckets by its times, linear in log-log between the sizes around each.
  sweep.allreduce["nonblocking"] = true;
  sweep.allreduce["algorithm_asked"] = "ring";
  sweep.allreduce["sizes"] = nlohmann::json::parse(
      R"([{"bytes": 8192, "seconds": 1e-4}, {"bytes": 16384, "seconds": 2e-4}, {"bytes": 262144, "seconds": 1e-3}])");
  add_cluster_predictions(sweep);
  const double big = 2e-4 * std::pow(5.0, std::log(236536.0 / 16384) / std::log(16.0));
  EXPECT_EQ(sweep.points[1].prediction.at("communication_from"), "bench times");
  EXPECT_NEAR(sweep.points[1].prediction.at("communication_s").get<double>(), 1e-4 * 10288 / 8192 + big, 1e-12);
  EXPECT_NEAR(sweep.points[1].prediction.at("predicted_step_s").get<double>(),
              0.0055 + 0.5 * (1e-4 * 10288 / 8192 + big), 1e-12);
  // A capped link's tbf fills at the rate while the rank computes what does not hide
  // communication (5.5 ms less half the communication), up to its bucket (67,000 bytes or 4 ms at
  // the rate); those bytes of the 370,236 a rank sends on the ring go free. At 100mbit the rate
  // binds (62 kB), at 200mbit the 100 kB bucket does, at 1gbit it covers every byte.
  const double timed = 1e-4 * 10288 / 8192 + big;
  const double idle = 0.0055 - 0.5 * timed;
  for (const auto& [rate, covered] : std::vector<std::pair<std::string, double>>{
           {"100mbit", 12.5e6 * idle}, {"200mbit", 100000}, {"1gbit", 370236}}) {
    sweep.config["network"]["rate"] = rate;
    add_cluster_predictions(sweep);
    const nlohmann::json& capped = sweep.points[1].prediction;
    EXPECT_NEAR(capped.at("token_bucket_bytes").get<double>(), covered, 1e-6) << rate;
    EXPECT_NEAR(capped.at("communication_s").get<double>(), timed * (1 - covered / 370236), 1e-12) << rate;
    EXPECT_NEAR(capped.at("predicted_step_s").get<double>(), 0.0055 + 0.5 * timed * (1 - covered / 370236), 1e-12)
        << rate;
  }
  sweep.config["network"].erase("rate");
  // Timed on other ranks, or blocking, the bench does not price the point: the link does.
  sweep.allreduce["ranks"] = 2;
  add_cluster_predictions(sweep);
  EXPECT_EQ(sweep.points[1].prediction.at("communication_from"), "link fit");
  sweep.allreduce["ranks"] = 4;
  sweep.allreduce["nonblocking"] = false;
  add_cluster_predictions(sweep);
  EXPECT_EQ(sweep.points[1].prediction.at("communication_from"), "link fit");
  // An id libnbc does not have leaves the point unpredicted rather than failing the sweep.
  sweep.points[1].strategy_metrics["allreduce"]["iallreduce_algorithm_id"] = 7;
  add_cluster_predictions(sweep);
  EXPECT_TRUE(sweep.points[1].prediction.is_null());
  EXPECT_THROW(iallreduce_asked(sweep.points[1].strategy_metrics), Error);
}

}  // namespace
}  // namespace cnnbench
