// How a batch is cut into shares over parts (ranks, threads, copies of a net) and how dynamic
// balancing re-sizes the shares from measured speed or time: pure arithmetic, so that every
// rank computes the same shares from the same inputs.
#pragma once

#include <limits>
#include <vector>

namespace cnnbench {

// Cuts `total` items into `parts` contiguous shares as evenly as possible: the first
// total % parts shares get one more. Sizes only; offsets are the running sum.
std::vector<int> split_evenly(int total, int parts);

// Share `part` of split_evenly(total, parts), with its offset: the first item it holds.
struct EvenShare {
  int offset = 0;
  int count = 0;
};
EvenShare even_share(int total, int parts, int part);

// Re-sizes shares of `total` items in proportion to each part's measured throughput (items/s),
// with at least `minimum` items per part, by largest remainder (ties to the lower index), so
// every rank computes the same answer from the same inputs. Non-positive or non-finite
// throughputs are treated as the mean of the valid ones (or an even split if none is valid).
// No part gets more than `maximum` (what its buffers hold); a part the proportional split would
// push past it is held there and the others share the rest by the same rule.
std::vector<int> balance_shares(int total, const std::vector<double>& throughputs, int minimum,
                                int maximum = std::numeric_limits<int>::max());

// One move of dynamic balancing towards equal compute times: when the slowest part took more
// than (1 + tolerance) times the fastest part's `seconds`, samples go from the slowest to the
// fastest, as many as would make the two take equally long at their measured seconds per sample,
// keeping shares within [minimum, maximum]; otherwise the shares stay. Balancing times rather
// than sharing by throughput stays put under a fixed per-part cost (zeroing a gradient buffer):
// there, the smaller part's throughput looks lower and sharing by throughput shrinks it further.
// With `granule` > 1 a move is a whole number of granules, the nearest to the equalizing count
// (none below half a granule): for parts whose time is a staircase in their share, as a dense
// kernel's that runs a share's rows in blocks, where a few samples more cost a whole block.
std::vector<int> equalize_times(std::vector<int> shares, const std::vector<double>& seconds,
                                int minimum, int maximum, double tolerance, int granule = 1);

}  // namespace cnnbench
