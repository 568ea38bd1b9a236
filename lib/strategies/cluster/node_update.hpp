// How the threads of a rank turn their gradient buffers into the next weights: the cut of the
// flat gradient into cache-line slices for the reduce-scatter, and which of the two designs
// (a replica of the model per thread, or one shared model stepped slice by slice) a model takes.
#pragma once

#include <cstddef>
#include <vector>

#include "cnnbench/cluster.hpp"

namespace cnnbench {

// Floats [begin, end) of the flat parameter buffer.
struct FloatRange {
  std::size_t begin = 0, end = 0;
  std::size_t size() const { return end - begin; }
};

// 64-byte lines: no two slices share one, so no two threads write the same line.
constexpr std::size_t floats_per_cache_line = 16;

// `count` floats cut into `parts` contiguous slices of whole cache lines, as evenly as lines
// allow (the first ones get a line more, the last slice also takes the partial tail line).
// A slice may be empty when there are fewer lines than parts.
std::vector<FloatRange> cache_line_slices(std::size_t count, int parts);
// Floats [range.begin, range.end) cut into `parts` contiguous slices at multiples of a line of
// the whole buffer (the first starts at range.begin, the last ends at range.end), as evenly as
// the lines allow.
std::vector<FloatRange> cache_line_slices(FloatRange range, int parts);

// Replicas of one rank with at most this many threads skip the reduce-scatter: every replica sums
// all buffers itself ((T + 2) n floats per thread, no more than the scatter's (T + 1) n / T + 3n
// up to T = 2) in one dispatch instead of two.
constexpr int every_replica_sums_max_threads = 2;

}  // namespace cnnbench
