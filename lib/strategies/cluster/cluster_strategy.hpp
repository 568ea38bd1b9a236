// The cluster strategy on a given group of ranks: MPI_COMM_WORLD's in the registry's
// make_cluster_strategy(), ranks simulated in one process in the tests.
#pragma once

#include <memory>

#include "../rank_group.hpp"
#include "cnnbench/train.hpp"

namespace cnnbench {

// The strategy's collectives go through `group`; its threads call the group from any of them
// (one at a time) only when group->any_thread_may_call(), else from the thread that prepares it.
std::unique_ptr<Strategy> make_cluster_strategy(std::unique_ptr<RankGroup> group);

}  // namespace cnnbench
