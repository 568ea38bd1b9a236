// MNIST from IDX files (validated before anything is allocated), a synthetic data set for tests
// and data-independent benchmarks, the seeded per-epoch order, and batch conversion.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace cnnbench {

// Raw contents of one IDX file of unsigned bytes (type 0x08).
struct IdxArray {
  std::vector<std::uint32_t> dims;
  std::vector<std::uint8_t> data;
};
// Validates magic (0x00 0x00 0x08 rank), rank == expected_rank, every dimension > 0, and that the
// file holds exactly prod(dims) bytes after the header, before allocating. Any mismatch throws
// FormatError with the file, byte offset, expected and found value.
// A path ending in .gz is decompressed by running `gzip -dc` (no zlib dependency): offsets then
// count decompressed bytes, and as the size is only known at the end of the stream, memory grows
// with the data actually received, never with what the header claims.
IdxArray read_idx(const std::filesystem::path& file, int expected_rank);

// Images stay bytes (count x rows x cols); a batch is converted to float when it is used.
struct Dataset {
  std::vector<std::uint8_t> images;
  std::vector<std::uint8_t> labels;  // 0..9
  std::size_t count = 0;
  int rows = 28;
  int cols = 28;
  std::string source;  // file names or "synthetic(N, seed)"
  std::size_t image_size() const { return static_cast<std::size_t>(rows) * cols; }
};

enum class Split { train, test };
// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte from dir (the raw file when present, else
// the .gz); checks the two files agree (count), 28x28 images and labels <= 9. Error names the
// missing file and how to fetch it (datasets/fetch_mnist.sh) or avoid it (--synthetic N).
Dataset load_mnist(const std::filesystem::path& dir, Split split);

// N deterministic, learnable 28x28 samples from the seed: each class is a fixed random stroke
// pattern plus per-sample noise and shift, so a net can fit it but it is not trivial.
// Samples [first, first + count) of the seed's endless sequence: a held-out test set of the same
// classes is make_synthetic(m, seed, n) after a training set make_synthetic(n, seed).
Dataset make_synthetic(std::size_t count, std::uint64_t seed, std::size_t first = 0);

// The visiting order of epoch `epoch`: a Fisher-Yates permutation from derive_seed(seed, epoch),
// or 0..n-1 when shuffle is false.
std::vector<std::uint32_t> epoch_order(std::size_t count, std::uint64_t seed, std::int64_t epoch,
                                       bool shuffle);

// x (n,1,rows,cols) = pixel / 255 and y (n) for the samples indices[0..n).
void gather_batch(float* x, std::uint8_t* y, const Dataset& data, const std::uint32_t* indices,
                  int n);

}  // namespace cnnbench
