// The cluster strategy's cut of each global batch over ranks and threads, and its dynamic
// balancing (the rules are in cnnbench/balance.hpp).
#include "cluster_shares.hpp"

#include <algorithm>
#include <numeric>

#include "cnnbench/balance.hpp"
#include "cnnbench/core.hpp"

namespace cnnbench {

namespace {
// Compute times that differ by less than this are noise, not imbalance.
constexpr double balance_tolerance = 0.05;
// Shares move in whole blocks of the own dense kernel's rows (lib/layers/dense.cpp: 4-8 rows a
// block by target): FC-3's step is a staircase in its batch (serial at 30 and 32 samples 338-341
// us, at 34 434-438 us), so moving 2 samples off a 32/32 split made the grown share slower per
// sample than the one it left, and --balance dynamic cost FC-3 1 x 2 an eighth of its step
// (docs/cluster.md, "Where 1 x 2 and 2 x 1 lose their time").
constexpr int balance_granule = 8;
}  // namespace

ClusterShares::ClusterShares(int batch, int ranks, int rank, int threads, bool dynamic_balance)
    : batch_(batch), rank_(rank), threads_(threads), dynamic_(dynamic_balance) {
  CNNBENCH_CHECK(batch > 0, "--batch must be positive");
  CNNBENCH_CHECK(threads > 0 && rank >= 0 && rank < ranks,
                 "cluster: rank " + std::to_string(rank) + " of " + std::to_string(ranks) +
                     " with " + std::to_string(threads) + " threads");
  // A thread's share is at most ceil(batch / threads) (the whole batch may land on one rank
  // when balancing dynamically); balancing the threads of a rank lets one take up to twice that.
  const int even_share = (batch + threads - 1) / threads;
  max_thread_share_ = dynamic_ && threads > 1 ? std::min(batch, 2 * even_share) : even_share;
  rank_shares_ = split_evenly(batch, ranks);
  last_thread_shares_.assign(static_cast<std::size_t>(threads), 0);
}

StepShares ClusterShares::next_step() {
  StepShares step;
  step.rank_offset = std::accumulate(rank_shares_.begin(), rank_shares_.begin() + rank_, 0);
  step.rank_share = rank_shares_[static_cast<std::size_t>(rank_)];
  step.thread_shares = thread_shares_of(step.rank_share);
  step.thread_offsets.assign(step.thread_shares.size(), step.rank_offset);
  for (std::size_t t = 1; t < step.thread_shares.size(); ++t) {
    step.thread_offsets[t] = step.thread_offsets[t - 1] + step.thread_shares[t - 1];
  }
  last_thread_shares_ = step.thread_shares;
  return step;
}

// A rank's share over its threads: even, or (dynamic balance) as the threads' measured times
// moved it, since the cores of one machine need not be equally fast (a virtual machine's cores
// share their hosts with other guests; core 0 takes the interrupts). When the rank's share
// changed, the threads keep their proportions of it.
std::vector<int> ClusterShares::thread_shares_of(int rank_share) {
  if (!dynamic_ || threads_ == 1) return split_evenly(rank_share, threads_);
  const int minimum = rank_share >= threads_ ? 1 : 0;
  if (thread_shares_.empty()) {
    thread_shares_ = split_evenly(rank_share, threads_);
  } else if (std::accumulate(thread_shares_.begin(), thread_shares_.end(), 0) != rank_share) {
    const std::vector<double> weights(thread_shares_.begin(), thread_shares_.end());
    thread_shares_ = balance_shares(rank_share, weights, minimum, max_thread_share_);
  }
  return thread_shares_;
}

void ClusterShares::balance_threads(const std::vector<double>& seconds) {
  const int rank_share = std::accumulate(last_thread_shares_.begin(), last_thread_shares_.end(), 0);
  const int minimum = rank_share >= threads_ ? 1 : 0;
  thread_shares_ = equalize_times(last_thread_shares_, seconds, minimum, max_thread_share_,
                                  balance_tolerance, balance_granule);
}

// Every rank sees the same compute times and so computes the same new shares.
void ClusterShares::balance_ranks(const std::vector<double>& seconds) {
  const int ranks = static_cast<int>(rank_shares_.size());
  const int minimum = batch_ >= ranks ? 1 : 0;
  rank_shares_ = equalize_times(rank_shares_, seconds, minimum, batch_, balance_tolerance, balance_granule);
}

}  // namespace cnnbench
