// The per-epoch visiting order (seeded Fisher-Yates) and the conversion of a batch to floats.
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

void gather_batch(float* x, std::uint8_t* y, const Dataset& data, const std::uint32_t* indices,
                  int n) {
  const std::size_t pixels = data.image_size();
  for (int i = 0; i < n; ++i) {
    const std::size_t sample = indices[i];
    CNNBENCH_CHECK(sample < data.count, "gather_batch: sample index " + std::to_string(sample) +
                                            " is outside the data set of " +
                                            std::to_string(data.count));
    const std::uint8_t* image = data.images.data() + sample * pixels;
    float* out = x + static_cast<std::size_t>(i) * pixels;
    // Division (not multiplication by 1/255) so the floats equal torchvision's ToTensor.
    for (std::size_t p = 0; p < pixels; ++p) out[p] = static_cast<float>(image[p]) / 255.0f;
    y[i] = data.labels[sample];
  }
}

}  // namespace cnnbench
