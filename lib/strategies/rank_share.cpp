// A rank's share of the global batch: the even split, with an error a user can act on when
// there are more ranks than samples.
#include "rank_share.hpp"

#include <string>

#include "cnnbench/balance.hpp"
#include "cnnbench/core.hpp"

namespace cnnbench {

RankShare rank_share(int batch, int ranks, int rank) {
  CNNBENCH_CHECK(ranks > 0 && rank >= 0 && rank < ranks,
                 "rank " + std::to_string(rank) + " is not in a job of " + std::to_string(ranks) +
                     " ranks");
  if (batch < ranks) {
    fail("--batch " + std::to_string(batch) + " is smaller than the " + std::to_string(ranks) +
         " MPI ranks: every rank needs at least one sample of each batch (use --batch >= " +
         std::to_string(ranks) + " or fewer ranks)");
  }
  const EvenShare share = even_share(batch, ranks, rank);
  return {share.offset, share.count};
}

}  // namespace cnnbench
