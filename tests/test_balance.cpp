// How a batch is cut into shares over ranks, threads or copies of a net, and how dynamic
// balancing re-sizes them (cnnbench/balance.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "cnnbench/balance.hpp"
#include "cnnbench/core.hpp"

namespace cnnbench {
namespace {

int sum(const std::vector<int>& shares) { return std::accumulate(shares.begin(), shares.end(), 0); }

TEST(ClusterShares, SplitEvenlyKeepsEveryItemAndDiffersByAtMostOne) {
  for (const int parts : {1, 2, 3, 4, 7}) {
    for (const int total : {0, 1, 2, 6, 7, 64, 1001}) {
      const auto shares = split_evenly(total, parts);
      ASSERT_EQ(static_cast<int>(shares.size()), parts);
      EXPECT_EQ(sum(shares), total);
      const auto [low, high] = std::minmax_element(shares.begin(), shares.end());
      EXPECT_LE(*high - *low, 1);
      EXPECT_TRUE(std::is_sorted(shares.rbegin(), shares.rend())) << "larger shares come first";
    }
  }
  EXPECT_THROW(split_evenly(5, 0), Error);
}

TEST(ClusterShares, BalanceFollowsThroughput) {
  // Oracle: exact proportional shares are integers here, so largest remainder must hit them.
  EXPECT_EQ(balance_shares(64, {1.0, 1.0}, 1), (std::vector<int>{32, 32}));
  EXPECT_EQ(balance_shares(60, {2.0, 1.0}, 0), (std::vector<int>{40, 20}));
  EXPECT_EQ(balance_shares(60, {200.0, 100.0, 300.0}, 0), (std::vector<int>{20, 10, 30}));
  // With a minimum the spare items still follow speed: 4 + (64 - 8) * [3/4, 1/4].
  EXPECT_EQ(balance_shares(64, {3.0, 1.0}, 4), (std::vector<int>{46, 18}));
}

TEST(ClusterShares, BalanceKeepsTheWholeBatchAndTheMinimum) {
  Rng rng(9);
  for (int trial = 0; trial < 200; ++trial) {
    const int parts = 1 + static_cast<int>(rng.below(7));
    const int total = parts + static_cast<int>(rng.below(200));
    std::vector<double> speed(static_cast<std::size_t>(parts));
    for (auto& s : speed) s = rng.uniform(0.01f, 10.0f);
    const auto shares = balance_shares(total, speed, 1);
    EXPECT_EQ(sum(shares), total);
    for (const int share : shares) EXPECT_GE(share, 1);
    // Largest remainder: every share is within one item of its exact proportional value.
    const double speed_sum = std::accumulate(speed.begin(), speed.end(), 0.0);
    for (int p = 0; p < parts; ++p) {
      const double exact = 1 + (total - parts) * speed[static_cast<std::size_t>(p)] / speed_sum;
      EXPECT_LT(std::abs(shares[static_cast<std::size_t>(p)] - exact), 1.0 + 1e-9);
    }
  }
}

TEST(ClusterShares, BalanceHoldsPartsAtTheMaximum) {
  // 90 of 100 would go to part 0; it holds 64, and the other two share the remaining 36 by speed.
  EXPECT_EQ(balance_shares(100, {9.0, 0.5, 0.5}, 0, 64), (std::vector<int>{64, 18, 18}));
  // Held parts may cascade: part 1 then also exceeds the maximum.
  EXPECT_EQ(balance_shares(90, {100.0, 10.0, 1.0}, 1, 40), (std::vector<int>{40, 40, 10}));
  EXPECT_EQ(balance_shares(64, {1.0, 1.0}, 1, 32), (std::vector<int>{32, 32}));
  EXPECT_THROW(balance_shares(65, {1.0, 1.0}, 0, 32), Error);  // does not fit
  Rng rng(4);
  for (int trial = 0; trial < 200; ++trial) {
    const int parts = 1 + static_cast<int>(rng.below(6));
    const int maximum = 1 + static_cast<int>(rng.below(40));
    const int total = static_cast<int>(rng.below(static_cast<std::uint64_t>(parts * maximum + 1)));
    std::vector<double> speed(static_cast<std::size_t>(parts));
    for (auto& s : speed) s = rng.uniform(0.01f, 10.0f);
    const auto shares = balance_shares(total, speed, 0, maximum);
    EXPECT_EQ(sum(shares), total);
    for (const int share : shares) {
      EXPECT_GE(share, 0);
      EXPECT_LE(share, maximum);
    }
  }
}

// Simulated parts: a part's compute takes fixed + samples * per_sample seconds.
std::vector<double> simulated_times(const std::vector<int>& shares, double fixed,
                                    const std::vector<double>& per_sample) {
  std::vector<double> times;
  for (std::size_t p = 0; p < shares.size(); ++p) times.push_back(fixed + shares[p] * per_sample[p]);
  return times;
}

TEST(ClusterShares, EqualizingTimesConvergesAndStaysUnderAFixedCost) {
  // Equal cores with a fixed cost per part: a skewed split must come back to even and stay
  // (sharing by throughput would shrink the smaller part further).
  std::vector<int> shares = {20, 44};
  for (int step = 0; step < 20; ++step) {
    shares = equalize_times(shares, simulated_times(shares, 50e-6, {10e-6, 10e-6}), 1, 64, 0.05);
  }
  EXPECT_EQ(sum(shares), 64);
  EXPECT_LE(std::abs(shares[0] - shares[1]), 4) << shares[0] << " / " << shares[1];
  // One core twice as slow: about a third of the batch, within the tolerance.
  shares = {32, 32};
  for (int step = 0; step < 20; ++step) {
    shares = equalize_times(shares, simulated_times(shares, 0.0, {10e-6, 20e-6}), 1, 64, 0.05);
  }
  EXPECT_EQ(sum(shares), 64);
  EXPECT_NEAR(shares[1], 64.0 / 3, 2.0) << shares[0] << " / " << shares[1];
  // Four parts, one four times slower.
  std::vector<int> four = {16, 16, 16, 16};
  for (int step = 0; step < 40; ++step) {
    four = equalize_times(four, simulated_times(four, 0.0, {1e-6, 1e-6, 4e-6, 1e-6}), 1, 64, 0.05);
  }
  EXPECT_EQ(sum(four), 64);
  EXPECT_NEAR(four[2], 64.0 / 13, 2.0) << four[0] << " " << four[1] << " " << four[2] << " " << four[3];
}

TEST(ClusterShares, EqualizingTimesKeepsSharesWithinTheToleranceAndTheBounds) {
  EXPECT_EQ(equalize_times({32, 32}, {1.00, 1.04}, 1, 64, 0.05), (std::vector<int>{32, 32}));
  EXPECT_EQ(equalize_times({32, 32}, {1.0, 3.0}, 1, 40, 0.05), (std::vector<int>{40, 24}));
  EXPECT_EQ(equalize_times({3, 61}, {9.0, 1.0}, 2, 64, 0.05), (std::vector<int>{2, 62}));
  EXPECT_EQ(equalize_times({32, 32}, {1.0, 0.5}, 30, 64, 0.05), (std::vector<int>{30, 34}));
  EXPECT_THROW(equalize_times({32, 32}, {1.0}, 1, 64, 0.05), Error);
}

// A part whose time is a staircase in its share (blocks of 8 samples): whole granules move, the
// nearest count to equal times; a 10% difference moves none where single samples drift.
TEST(ClusterShares, EqualizingTimesMovesWholeGranules) {
  EXPECT_EQ(equalize_times({32, 32}, {1.0, 1.10}, 1, 64, 0.05), (std::vector<int>{33, 31}));
  EXPECT_EQ(equalize_times({32, 32}, {1.0, 1.10}, 1, 64, 0.05, 8), (std::vector<int>{32, 32}));
  EXPECT_EQ(equalize_times({32, 32}, {1.0, 2.0}, 1, 64, 0.05, 8), (std::vector<int>{40, 24}));
  EXPECT_EQ(equalize_times({32, 32}, {1.0, 3.0}, 1, 36, 0.05, 8), (std::vector<int>{32, 32}))
      << "a bound that leaves less than a granule moves nothing";
  EXPECT_THROW(equalize_times({32, 32}, {1.0, 2.0}, 1, 64, 0.05, 0), Error);
  // Staircase times, one core twice as slow: the shares settle on whole blocks and stay.
  const auto staircase = [](const std::vector<int>& shares, const std::vector<double>& per_block) {
    std::vector<double> times;
    for (std::size_t p = 0; p < shares.size(); ++p) times.push_back(((shares[p] + 7) / 8) * per_block[p]);
    return times;
  };
  std::vector<int> shares = {32, 32};
  for (int step = 0; step < 20; ++step) shares = equalize_times(shares, staircase(shares, {1.0, 2.0}), 1, 64, 0.05, 8);
  EXPECT_EQ(shares, (std::vector<int>{40, 24}));
}

TEST(ClusterShares, BalanceTreatsMissingMeasurementsAsAverage) {
  EXPECT_EQ(balance_shares(30, {0.0, 0.0, 0.0}, 0), split_evenly(30, 3));
  EXPECT_EQ(balance_shares(30, {2.0, -1.0, 2.0}, 0), (std::vector<int>{10, 10, 10}));
  EXPECT_THROW(balance_shares(3, {1.0, 1.0}, 2), Error);
}

TEST(ClusterShares, EvenShareIsSplitEvenlysShareWithItsOffset) {
  for (const int parts : {1, 2, 3, 4, 7}) {
    for (const int total : {0, 1, 5, 31, 64, 1001}) {
      const std::vector<int> shares = split_evenly(total, parts);
      int offset = 0;
      for (int part = 0; part < parts; ++part) {
        const EvenShare share = even_share(total, parts, part);
        EXPECT_EQ(share.offset, offset) << total << " over " << parts << ", part " << part;
        EXPECT_EQ(share.count, shares[static_cast<std::size_t>(part)]);
        offset += share.count;
      }
    }
  }
  EXPECT_THROW(even_share(8, 2, 2), Error);
  EXPECT_THROW(even_share(8, 2, -1), Error);
}

}  // namespace
}  // namespace cnnbench
