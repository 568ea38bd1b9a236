// libFuzzer target for the IDX reader: any bytes either load as an array whose size is exactly
// what its header says, or throw cnnbench::Error. Run with -malloc_limit_mb=64: a header that
// claims huge dimensions must be refused before anything of that size is allocated.
#include <cstddef>
#include <cstdint>

#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"
#include "fuzz_input_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const cnnbench::fuzz::InputFile file("input.idx");
  // The rank byte of the magic picks the expected rank (1..4), so every rank path is reached;
  // other values still exercise the rank-mismatch error with rank 3 (MNIST images).
  const int rank = size >= 4 && data[3] >= 1 && data[3] <= 4 ? data[3] : 3;
  const auto array = file.read_back(
      data, size, [rank](const auto& path) { return cnnbench::read_idx(path, rank); });
  if (!array) return 0;
  std::size_t elements = 1;
  for (const std::uint32_t d : array->dims) elements *= d;
  const bool consistent = array->dims.size() == static_cast<std::size_t>(rank) &&
                          array->data.size() == elements &&
                          4 + 4 * array->dims.size() + array->data.size() == size;
  if (!consistent) __builtin_trap();
  return 0;
}
