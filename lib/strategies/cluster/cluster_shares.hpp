// How the cluster strategy cuts each global batch: into contiguous per-rank shares, and a rank's
// share into per-thread shares. Even, or (--balance dynamic) moved after every step towards equal
// compute times, by the same rule on every rank so that all ranks agree on the cut.
#pragma once

#include <vector>

namespace cnnbench {

// One step's cut, as this rank sees it.
struct StepShares {
  int rank_offset = 0;  // first sample of the global batch this rank computes
  int rank_share = 0;
  std::vector<int> thread_shares;   // of rank_share, by thread
  std::vector<int> thread_offsets;  // into the global batch, by thread
};

class ClusterShares {
 public:
  ClusterShares(int batch, int ranks, int rank, int threads, bool dynamic_balance);

  // What a thread's buffers must hold: ceil(batch / threads), or (dynamic balance over several
  // threads) up to twice that, as balancing may give a thread more than its even share.
  int max_thread_share() const { return max_thread_share_; }

  // The cut of the next step.
  StepShares next_step();
  // Dynamic balance, after the map: the threads' compute seconds of the step just cut.
  void balance_threads(const std::vector<double>& seconds);
  // Dynamic balance, after the exchange: every rank's compute seconds (the same on every rank).
  void balance_ranks(const std::vector<double>& seconds);

  // The threads' shares of the last step cut (even, before any).
  const std::vector<int>& last_thread_shares() const { return last_thread_shares_; }

 private:
  std::vector<int> thread_shares_of(int rank_share);

  int batch_, rank_, threads_;
  bool dynamic_;
  int max_thread_share_;
  std::vector<int> rank_shares_;         // of each global batch, by rank
  std::vector<int> thread_shares_;       // of this rank's share, by thread (dynamic balance)
  std::vector<int> last_thread_shares_;  // of this rank's share, by thread, last step
};

}  // namespace cnnbench
