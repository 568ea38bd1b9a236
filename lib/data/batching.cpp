// The per-epoch visiting order (seeded Fisher-Yates), unsharded or over per-node blocks, and the
// conversion of a batch to floats.
#include <algorithm>
#include <limits>
#include <numeric>

#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"

namespace cnnbench {

std::vector<std::uint32_t> epoch_order(std::size_t count, std::uint64_t seed, std::int64_t epoch,
                                       bool shuffle) {
  CNNBENCH_CHECK(count <= 0xffffffffULL, "epoch_order: data sets are limited to 2^32-1 samples");
  std::vector<std::uint32_t> order(count);
  std::iota(order.begin(), order.end(), 0u);
  if (!shuffle || count < 2) return order;
  Rng rng(derive_seed(seed, static_cast<std::uint64_t>(epoch)));
  // Fisher-Yates from the back: position i takes a uniform pick among [0, i].
  for (std::size_t i = count - 1; i > 0; --i) {
    const std::size_t j = static_cast<std::size_t>(rng.below(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

DataBlock data_block(std::size_t total, int blocks, int block) {
  CNNBENCH_CHECK(blocks > 0 && block >= 0 && block < blocks,
                 "block " + std::to_string(block) + " of " + std::to_string(blocks) +
                     " does not exist");
  const auto parts = static_cast<std::size_t>(blocks), index = static_cast<std::size_t>(block);
  const std::size_t base = total / parts, extra = total % parts;
  return {index * base + std::min(index, extra), base + (index < extra ? 1 : 0)};
}

std::uint64_t shard_seed(std::uint64_t seed, int shard) {
  constexpr std::uint64_t shard_stream = 0x7368617264000000;  // "shard"
  return shard == 0 ? seed : derive_seed(seed, shard_stream + static_cast<std::uint64_t>(shard));
}

std::int64_t sharded_steps_per_epoch(std::size_t total, int shards, int batch) {
  CNNBENCH_CHECK(shards >= 1 && batch >= shards, "--shards " + std::to_string(shards) +
                                                     ": needs 1 <= shards <= the batch of " +
                                                     std::to_string(batch));
  auto steps = std::numeric_limits<std::int64_t>::max();
  for (int r = 0; r < shards; ++r) {
    const std::size_t share = data_block(static_cast<std::size_t>(batch), shards, r).count;
    steps = std::min(steps, static_cast<std::int64_t>(data_block(total, shards, r).count / share));
  }
  return steps;
}

std::vector<std::uint32_t> sharded_epoch_order(std::size_t total, int shards, int batch,
                                               std::uint64_t seed, std::int64_t epoch,
                                               bool shuffle) {
  if (shards == 1) return epoch_order(total, seed, epoch, shuffle);
  const std::int64_t steps = sharded_steps_per_epoch(total, shards, batch);
  std::vector<std::uint32_t> order(static_cast<std::size_t>(steps) * static_cast<std::size_t>(batch));
  std::size_t offset = 0;  // of shard r's share inside a batch
  for (int r = 0; r < shards; ++r) {
    const DataBlock block = data_block(total, shards, r);
    const std::size_t share = data_block(static_cast<std::size_t>(batch), shards, r).count;
    const std::vector<std::uint32_t> own = epoch_order(block.count, shard_seed(seed, r), epoch, shuffle);
    for (std::int64_t k = 0; k < steps; ++k) {
      const std::size_t from = static_cast<std::size_t>(k) * share;
      std::uint32_t* to = order.data() + static_cast<std::size_t>(k) * batch + offset;
      for (std::size_t j = 0; j < share; ++j) {
        to[j] = static_cast<std::uint32_t>(block.first + own[from + j]);
      }
    }
    offset += share;
  }
  return order;
}

void gather_batch(float* x, std::uint8_t* y, const Dataset& data, const std::uint32_t* indices,
                  int n) {
  const std::size_t pixels = data.image_size();
  for (int i = 0; i < n; ++i) {
    const std::size_t sample = indices[i] - data.first;  // wraps past count when below first
    if (sample >= data.count) {
      fail("gather_batch: sample " + std::to_string(indices[i]) +
           (data.total > 0 ? " is outside this process's block [" + std::to_string(data.first) +
                                 ", " + std::to_string(data.first + data.count) + ") of the " +
                                 std::to_string(data.total) + " samples of " + data.source
                           : " is outside the data set of " + std::to_string(data.count)));
    }
    pixels_to_unit_floats(x + static_cast<std::size_t>(i) * pixels,
                          data.images.data() + sample * pixels, pixels);
    y[i] = data.labels[sample];
  }
}

}  // namespace cnnbench
