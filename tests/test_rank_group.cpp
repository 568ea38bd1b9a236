// How a global batch is shared among MPI ranks (the GPU strategy's rule), and the one-rank group
// a run without mpirun gets: no MPI, sums (blocking or started) and gathers give back their input.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../lib/strategies/rank_group.hpp"
#include "../lib/strategies/rank_share.hpp"
#include "cnnbench/core.hpp"

namespace cnnbench {
namespace {

// The oracle: deal the batch's samples to ranks one at a time, then lay the hands out in rank
// order; the result is the same sizes as split_evenly, and offsets are the running sum.
std::vector<RankShare> dealt_shares(int batch, int ranks) {
  std::vector<int> counts(static_cast<std::size_t>(ranks), 0);
  for (int sample = 0; sample < batch; ++sample) ++counts[static_cast<std::size_t>(sample % ranks)];
  std::vector<RankShare> shares;
  int offset = 0;
  for (const int count : counts) {
    shares.push_back({offset, count});
    offset += count;
  }
  return shares;
}

TEST(RankShare, CutsTheBatchIntoContiguousSharesDifferingByAtMostOne) {
  for (const int ranks : {1, 2, 3, 4, 7}) {
    for (const int batch : {ranks, ranks + 1, 31, 64, 1001, 1024}) {
      if (batch < ranks) continue;
      const auto expected = dealt_shares(batch, ranks);
      for (int rank = 0; rank < ranks; ++rank) {
        const RankShare got = rank_share(batch, ranks, rank);
        const RankShare& want = expected[static_cast<std::size_t>(rank)];
        EXPECT_EQ(got.offset, want.offset) << "batch " << batch << ", rank " << rank << " of " << ranks;
        EXPECT_EQ(got.count, want.count) << "batch " << batch << ", rank " << rank << " of " << ranks;
        EXPECT_GE(got.count, 1);
      }
    }
  }
}

TEST(RankShare, MoreRanksThanSamplesIsAnErrorNamingTheBatch) {
  try {
    rank_share(2, 3, 0);
    ADD_FAILURE() << "a batch of 2 was cut over 3 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--batch 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("3 MPI ranks"), std::string::npos) << e.what();
  }
  EXPECT_THROW(rank_share(8, 2, 2), Error);
  EXPECT_THROW(rank_share(8, 0, 0), Error);
}

TEST(SingleRankGroup, LeavesBuffersAsTheyAre) {
  const auto group = make_single_rank_group();
  EXPECT_EQ(group->rank(), 0);
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(group->node_rank(), 0);
  std::vector<float> floats = {1.5f, -2.0f, 3e-8f};
  const std::vector<float> floats_before = floats;
  group->sum_in_rank_order(floats.data(), floats.size());
  EXPECT_EQ(floats, floats_before);
  std::vector<double> doubles = {0.1, 1e300};
  const std::vector<double> doubles_before = doubles;
  group->sum_in_rank_order(doubles.data(), doubles.size());
  EXPECT_EQ(doubles, doubles_before);
  group->sum(floats.data(), floats.size());
  group->start_sum(floats.data(), floats.size());
  EXPECT_TRUE(group->progress_sums());
  group->wait_for_sums();
  EXPECT_EQ(floats, floats_before);
  group->sum(doubles.data(), doubles.size());
  group->start_sum(doubles.data(), doubles.size());
  group->wait_for_sums();
  EXPECT_EQ(doubles, doubles_before);
  EXPECT_EQ(group->node_size(), 1);
  EXPECT_TRUE(group->any_thread_may_call());
  EXPECT_EQ(group->gather_on_node({4, 7}), (std::vector<int>{4, 7}));
  EXPECT_EQ(group->gather_to_all("only"), std::vector<std::string>{"only"});
  EXPECT_TRUE(group->any_rank(true));
  EXPECT_FALSE(group->any_rank(false));
  group->end_job_after_error("returns on one rank");  // the caller passes the error on
}

TEST(RankGroup, APlainRunIsOneRankWithoutMpi) {
  if (started_by_mpi_launcher()) GTEST_SKIP() << "this test process was started by an MPI launcher";
  const auto group = join_rank_group();
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(group->rank(), 0);
}

}  // namespace
}  // namespace cnnbench
