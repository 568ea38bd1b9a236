// The cluster strategy's intra-node reduce-scatter slices and its choice between replicas and
// one shared model (docs/cluster.md, "Inside a rank").
#include "node_update.hpp"

#include <algorithm>

#include "cnnbench/core.hpp"

namespace cnnbench {

std::vector<FloatRange> cache_line_slices(std::size_t count, int parts) {
  CNNBENCH_CHECK(parts >= 1, "cache_line_slices needs at least one part");
  const std::size_t whole_lines = count / floats_per_cache_line;
  const auto n = static_cast<std::size_t>(parts);
  std::vector<FloatRange> slices(n);
  std::size_t at = 0;
  for (std::size_t p = 0; p < n; ++p) {
    const std::size_t lines = whole_lines / n + (p < whole_lines % n ? 1 : 0);
    slices[p] = {at, at + lines * floats_per_cache_line};
    at = slices[p].end;
  }
  slices.back().end = count;
  return slices;
}

std::vector<FloatRange> cache_line_slices(FloatRange range, int parts) {
  CNNBENCH_CHECK(parts >= 1, "cache_line_slices needs at least one part");
  const auto n = static_cast<std::size_t>(parts);
  std::vector<FloatRange> slices(n);
  std::size_t at = range.begin;
  for (std::size_t p = 0; p < n; ++p) {
    std::size_t end = range.end;
    if (p + 1 < n) {
      const std::size_t even = range.begin + range.size() * (p + 1) / n;
      end = std::clamp(even / floats_per_cache_line * floats_per_cache_line, at, range.end);
    }
    slices[p] = {at, end};
    at = end;
  }
  return slices;
}


}  // namespace cnnbench
