// Epoch order (seeded Fisher-Yates), batch conversion and the synthetic data set.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <limits>
#include <numeric>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"

namespace cnnbench {
namespace {

bool is_permutation_of_iota(std::vector<std::uint32_t> order) {
  std::sort(order.begin(), order.end());
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (order[i] != i) return false;
  }
  return true;
}

// The documented algorithm, written out as the oracle: Fisher-Yates from the back with
// Rng(derive_seed(seed, epoch)).below(i + 1).
std::vector<std::uint32_t> reference_order(std::size_t n, std::uint64_t seed, std::int64_t epoch) {
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  Rng rng(derive_seed(seed, static_cast<std::uint64_t>(epoch)));
  for (std::size_t i = n; i-- > 1;) std::swap(order[i], order[rng.below(i + 1)]);
  return order;
}

TEST(EpochOrder, IsAPermutationMatchingTheDocumentedShuffle) {
  for (const std::size_t n : {0u, 1u, 2u, 7u, 1000u, 60000u}) {
    for (const std::int64_t epoch : {0, 1, 5}) {
      const auto order = epoch_order(n, 42, epoch, true);
      EXPECT_EQ(order.size(), n);
      EXPECT_TRUE(is_permutation_of_iota(order)) << "n=" << n << " epoch=" << epoch;
      EXPECT_EQ(order, reference_order(n, 42, epoch)) << "n=" << n << " epoch=" << epoch;
    }
  }
}

TEST(EpochOrder, DeterministicPerSeedAndEpoch) {
  EXPECT_EQ(epoch_order(500, 7, 3, true), epoch_order(500, 7, 3, true));
  EXPECT_NE(epoch_order(500, 7, 3, true), epoch_order(500, 7, 4, true));
  EXPECT_NE(epoch_order(500, 7, 3, true), epoch_order(500, 8, 3, true));
  EXPECT_NE(epoch_order(500, 7, 0, true), epoch_order(500, 7, 0, false));
}

TEST(EpochOrder, IdentityWithoutShuffle) {
  const auto order = epoch_order(100, 9, 4, false);
  for (std::size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], i);
}

TEST(EpochOrder, EveryPositionIsRoughlyUniform) {
  // Where sample 0 lands over 5000 epochs of 5 samples: 1000 per position expected, sd ~28.
  std::array<int, 5> landed{};
  for (std::int64_t epoch = 0; epoch < 5000; ++epoch) {
    const auto order = epoch_order(5, 1, epoch, true);
    const auto at = std::find(order.begin(), order.end(), 0u) - order.begin();
    ++landed[static_cast<std::size_t>(at)];
  }
  for (const int count : landed) {
    EXPECT_GT(count, 850);
    EXPECT_LT(count, 1150);
  }
}

TEST(GatherBatch, PixelsOver255AndLabels) {
  Dataset data;
  data.count = 3;
  data.images.resize(3 * 28 * 28);
  for (std::size_t i = 0; i < data.images.size(); ++i)
    data.images[i] = static_cast<std::uint8_t>(i * 7);
  data.labels = {4, 0, 9};
  const std::vector<std::uint32_t> indices = {2, 0, 2};
  std::vector<float> x(3 * 28 * 28, -1.0f);
  std::vector<std::uint8_t> y(3, 99);
  gather_batch(x.data(), y.data(), data, indices.data(), 3);
  for (std::size_t b = 0; b < 3; ++b) {
    EXPECT_EQ(y[b], data.labels[indices[b]]);
    for (std::size_t p = 0; p < 784; ++p) {
      const std::uint8_t byte = data.images[indices[b] * 784 + p];
      ASSERT_EQ(x[b * 784 + p], static_cast<float>(byte) / 255.0f)
          << "sample " << b << " pixel " << p;
    }
  }
  EXPECT_EQ(x[0], static_cast<float>(data.images[2 * 784]) / 255.0f);
}

TEST(GatherBatch, RejectsIndexOutsideTheDataSet) {
  const Dataset data = make_synthetic(4, 1);
  const std::vector<std::uint32_t> indices = {1, 4};
  std::vector<float> x(2 * 784);
  std::vector<std::uint8_t> y(2);
  EXPECT_THROW(gather_batch(x.data(), y.data(), data, indices.data(), 2), Error);
}

TEST(Synthetic, DeterministicAndPrefixStable) {
  const Dataset a = make_synthetic(300, 5);
  const Dataset b = make_synthetic(300, 5);
  EXPECT_EQ(a.images, b.images);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.count, 300u);
  EXPECT_EQ(a.images.size(), 300u * 28 * 28);
  EXPECT_EQ(a.source.rfind("synthetic(300, ", 0), 0u) << a.source;
  const Dataset other_seed = make_synthetic(300, 6);
  EXPECT_NE(a.images, other_seed.images);
  // Sample i does not depend on how many were asked for.
  const Dataset prefix = make_synthetic(100, 5);
  EXPECT_TRUE(std::equal(prefix.images.begin(), prefix.images.end(), a.images.begin()));
  EXPECT_TRUE(std::equal(prefix.labels.begin(), prefix.labels.end(), a.labels.begin()));
}

TEST(Synthetic, FirstSelectsALaterStretchOfTheSameSequence) {
  const Dataset all = make_synthetic(300, 5);
  const Dataset tail = make_synthetic(100, 5, 200);
  EXPECT_EQ(tail.count, 100u);
  EXPECT_TRUE(std::equal(tail.images.begin(), tail.images.end(), all.images.begin() + 200 * 784));
  EXPECT_TRUE(std::equal(tail.labels.begin(), tail.labels.end(), all.labels.begin() + 200));
}

TEST(Synthetic, ClassesAreBalancedAndImagesVary) {
  const Dataset data = make_synthetic(2000, 11);
  std::array<int, 10> per_class{};
  for (const auto label : data.labels) {
    ASSERT_LE(label, 9);
    ++per_class[label];
  }
  for (const int count : per_class) {
    EXPECT_GT(count, 140);  // 200 expected, sd ~13
    EXPECT_LT(count, 260);
  }
  const auto first = data.images.begin();
  EXPECT_FALSE(std::equal(first, first + 784, first + 784));
  const auto [low, high] = std::minmax_element(data.images.begin(), data.images.end());
  EXPECT_EQ(*low, 0);
  EXPECT_GT(*high, 200);
}

// Nearest class mean, fitted on 2000 samples and scored on 1000 others: far above chance (the
// data can be learned) and below perfect (shifts, fading, overlays and noise make it non-trivial).
TEST(Synthetic, LearnableButNotTrivial) {
  const Dataset data = make_synthetic(3000, 3);
  std::vector<double> means(10 * 784, 0.0);
  std::array<int, 10> counts{};
  for (std::size_t i = 0; i < 2000; ++i) {
    const int label = data.labels[i];
    ++counts[static_cast<std::size_t>(label)];
    for (std::size_t p = 0; p < 784; ++p)
      means[static_cast<std::size_t>(label) * 784 + p] += data.images[i * 784 + p];
  }
  for (std::size_t k = 0; k < 10; ++k) {
    for (std::size_t p = 0; p < 784; ++p) means[k * 784 + p] /= std::max(counts[k], 1);
  }
  int correct = 0;
  for (std::size_t i = 2000; i < 3000; ++i) {
    std::size_t best = 0;
    double best_distance = 1e300;
    for (std::size_t k = 0; k < 10; ++k) {
      double distance = 0;
      for (std::size_t p = 0; p < 784; ++p) {
        const double d = data.images[i * 784 + p] - means[k * 784 + p];
        distance += d * d;
      }
      if (distance < best_distance) {
        best_distance = distance;
        best = k;
      }
    }
    if (best == data.labels[i]) ++correct;
  }
  const double accuracy = correct / 1000.0;
  EXPECT_GT(accuracy, 0.4);
  EXPECT_LT(accuracy, 0.97);
}

// ---- the sharded order (docs/design.md, "Sample order") ------------------------------------------

TEST(DataBlock, SplitsLikeSplitEvenly) {
  // 10 over 4: 3, 3, 2, 2 from 0, 3, 6, 8.
  const std::vector<std::pair<std::size_t, std::size_t>> expected = {{0, 3}, {3, 3}, {6, 2}, {8, 2}};
  for (int r = 0; r < 4; ++r) {
    const DataBlock block = data_block(10, 4, r);
    EXPECT_EQ(block.first, expected[static_cast<std::size_t>(r)].first) << "block " << r;
    EXPECT_EQ(block.count, expected[static_cast<std::size_t>(r)].second) << "block " << r;
  }
  EXPECT_THROW(data_block(10, 4, 4), Error);
}

TEST(ShardedOrder, OneShardIsTheUnshardedOrder) {
  for (const bool shuffle : {true, false}) {
    for (const std::int64_t epoch : {0, 3}) {
      EXPECT_EQ(sharded_epoch_order(1000, 1, 64, 42, epoch, shuffle),
                epoch_order(1000, 42, epoch, shuffle));
    }
  }
  EXPECT_EQ(sharded_steps_per_epoch(1000, 1, 64), 1000 / 64);
}

TEST(ShardedOrder, BatchSharesComeFromTheirOwnBlockOncePerEpoch) {
  struct Case {
    std::size_t total;
    int shards, batch;
  };
  for (const Case c : {Case{1000, 2, 64}, Case{1001, 3, 10}, Case{97, 4, 7}, Case{50, 7, 7}}) {
    SCOPED_TRACE("total " + std::to_string(c.total) + " shards " + std::to_string(c.shards) +
                 " batch " + std::to_string(c.batch));
    // Steps per epoch: min over the blocks of floor(n_r / s_r), by hand.
    std::int64_t steps = std::numeric_limits<std::int64_t>::max();
    for (int r = 0; r < c.shards; ++r) {
      const auto share = data_block(static_cast<std::size_t>(c.batch), c.shards, r).count;
      steps = std::min<std::int64_t>(steps, data_block(c.total, c.shards, r).count / share);
    }
    ASSERT_EQ(sharded_steps_per_epoch(c.total, c.shards, c.batch), steps);
    for (const std::int64_t epoch : {0, 1}) {
      const auto order = sharded_epoch_order(c.total, c.shards, c.batch, 5, epoch, true);
      ASSERT_EQ(order.size(), static_cast<std::size_t>(steps * c.batch));
      std::vector<int> seen(c.total, 0);
      for (std::int64_t k = 0; k < steps; ++k) {
        std::size_t offset = 0;
        for (int r = 0; r < c.shards; ++r) {
          const DataBlock block = data_block(c.total, c.shards, r);
          const auto share = data_block(static_cast<std::size_t>(c.batch), c.shards, r).count;
          for (std::size_t j = 0; j < share; ++j) {
            const std::uint32_t sample = order[static_cast<std::size_t>(k * c.batch) + offset + j];
            EXPECT_GE(sample, block.first) << "batch " << k << " share " << r;
            EXPECT_LT(sample, block.first + block.count) << "batch " << k << " share " << r;
            if (sample < c.total) ++seen[sample];
          }
          offset += share;
        }
      }
      EXPECT_EQ(*std::max_element(seen.begin(), seen.end()), 1) << "a sample visited twice";
      // Shard r visits its block in its own seeded order: share r of batch 0 starts it.
      const DataBlock last = data_block(c.total, c.shards, c.shards - 1);
      const auto own = epoch_order(last.count, shard_seed(5, c.shards - 1), epoch, true);
      const auto last_share = data_block(static_cast<std::size_t>(c.batch), c.shards, c.shards - 1).count;
      EXPECT_EQ(order[static_cast<std::size_t>(c.batch) - last_share], last.first + own[0]);
    }
  }
}

TEST(ShardedOrder, ShardsBeyondTheBatchOrTooSmallBlocksGiveNoSteps) {
  EXPECT_THROW(sharded_steps_per_epoch(1000, 9, 8), Error);
  // 10 samples over 3 shards (4, 3, 3) with a batch of 9 (3 each): one step; batch 12: none.
  EXPECT_EQ(sharded_steps_per_epoch(10, 3, 9), 1);
  EXPECT_EQ(sharded_steps_per_epoch(10, 3, 12), 0);
}

TEST(GatherBatch, ABlockMapsWholeSetIndicesAndRefusesOthers) {
  const Dataset whole = make_synthetic(40, 3);
  const Dataset block = make_synthetic_block(40, 3, 3, 1);  // samples [14, 27)
  ASSERT_EQ(block.first, 14u);
  ASSERT_EQ(block.count, 13u);
  EXPECT_EQ(block.source, whole.source);
  const std::vector<std::uint32_t> indices = {14, 26, 20};
  std::vector<float> x_whole(3 * 784), x_block(3 * 784);
  std::vector<std::uint8_t> y_whole(3), y_block(3);
  gather_batch(x_whole.data(), y_whole.data(), whole, indices.data(), 3);
  gather_batch(x_block.data(), y_block.data(), block, indices.data(), 3);
  EXPECT_EQ(x_block, x_whole);
  EXPECT_EQ(y_block, y_whole);
  for (const std::uint32_t outside : {13u, 27u}) {
    try {
      gather_batch(x_block.data(), y_block.data(), block, &outside, 1);
      ADD_FAILURE() << "sample " << outside << " outside the block was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("outside this process's block [14, 27)"),
                std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace cnnbench
