// How a global batch is shared among the ranks of a job that computes it together (the GPU
// strategy's ranks).
#pragma once

namespace cnnbench {

// Rank `rank`'s contiguous share of a global batch cut over `ranks` ranks: the first
// batch % ranks ranks get one sample more (split_evenly's rule, balance.hpp).
struct RankShare {
  int offset = 0;  // first sample of the batch this rank computes
  int count = 0;   // samples it computes
};
// Error naming --batch when batch < ranks (a rank without samples would only add traffic).
RankShare rank_share(int batch, int ranks, int rank);

}  // namespace cnnbench
