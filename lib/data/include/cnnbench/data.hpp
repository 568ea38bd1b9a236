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

// Block `block` of `total` items cut into `blocks` contiguous blocks as evenly as possible: the
// first total % blocks blocks hold one more (split_evenly's rule, balance.hpp).
struct DataBlock {
  std::size_t first = 0;
  std::size_t count = 0;
};
DataBlock data_block(std::size_t total, int blocks, int block);

// Block `block` of `blocks` of the file's items (along dims[0]) and nothing else: the header and
// the file size are validated as read_idx does, then a plain file is read from the block's byte
// offset on; a .gz stream is decompressed through, the bytes outside the block read and dropped
// (never kept), and its length checked at the end. `dims` are the file's (dims[0] counts the whole
// file); `data` holds the block's items only.
IdxArray read_idx_block(const std::filesystem::path& file, int expected_rank, int blocks,
                        int block);

// Images stay bytes (count x rows x cols); a batch is converted to float when it is used.
// A Dataset may hold one block of a larger set (--shard-data, docs/cluster.md): its samples are
// the set's [first, first + count), and batches name them by their index in the whole set.
struct Dataset {
  std::vector<std::uint8_t> images;
  std::vector<std::uint8_t> labels;  // 0..9
  std::size_t count = 0;
  int rows = 28;
  int cols = 28;
  std::string source;  // file names or "synthetic(N, seed)": the whole set's, even for a block
  std::size_t first = 0;     // index in the whole set of sample 0
  std::size_t total = 0;     // samples of the whole set; 0: the set is whole (count)
  std::string block_source;  // a block: what was read ("bytes A..B of FILE", a shard folder)
  std::size_t image_size() const { return static_cast<std::size_t>(rows) * cols; }
  std::size_t set_size() const { return total > 0 ? total : count; }
};

enum class Split { train, test };
// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte from dir (the raw file when present, else
// the .gz); checks the two files agree (count), 28x28 images and labels <= 9. Error names the
// missing file and how to fetch it (datasets/fetch_mnist.sh) or avoid it (--synthetic N).
Dataset load_mnist(const std::filesystem::path& dir, Split split);
// Block `block` of `blocks` of the split, read as read_idx_block reads (never the whole file).
Dataset load_mnist_block(const std::filesystem::path& dir, Split split, int blocks, int block);

// A folder set written by datasets/shard.sh N DIR: DIR/shard-R (R = 0..N-1) holds the training
// samples of block R as MNIST IDX files (and the test files), with the manifest DIR/shard-R/
// block.txt naming the block, its first index and count and the whole set's count.
bool is_shard_folder_set(const std::filesystem::path& dir);
// Block `block` of such a set, after checking the manifest against the job (blocks, block, the
// split of its total) and against the IDX files; any mismatch is an error naming the file.
Dataset load_mnist_shard_folder(const std::filesystem::path& dir, int blocks, int block);

// N deterministic, learnable 28x28 samples from the seed: each class is a fixed random stroke
// pattern plus per-sample noise and shift, so a net can fit it but it is not trivial.
// Samples [first, first + count) of the seed's endless sequence: a held-out test set of the same
// classes is make_synthetic(m, seed, n) after a training set make_synthetic(n, seed).
Dataset make_synthetic(std::size_t count, std::uint64_t seed, std::size_t first = 0);
// Block `block` of `blocks` of make_synthetic(total, seed), as a block (first, total set).
Dataset make_synthetic_block(std::size_t total, std::uint64_t seed, int blocks, int block);

// The visiting order of epoch `epoch`: a Fisher-Yates permutation from derive_seed(seed, epoch),
// or 0..n-1 when shuffle is false.
std::vector<std::uint32_t> epoch_order(std::size_t count, std::uint64_t seed, std::int64_t epoch,
                                       bool shuffle);

// The sample order of the training set cut into `shards` blocks (docs/design.md, "Sample
// order"): block r = data_block(total, shards, r), the batch share s_r = data_block(batch, shards,
// r).count; epoch e visits block r in the order epoch_order(n_r, shard_seed(seed, r), e, shuffle),
// and global batch k is, for r = 0, 1, ..., shard r's samples [k s_r, (k + 1) s_r). Returns
// steps_per_epoch x batch indices into the whole set; one shard is exactly epoch_order's order.
std::vector<std::uint32_t> sharded_epoch_order(std::size_t total, int shards, int batch,
                                               std::uint64_t seed, std::int64_t epoch,
                                               bool shuffle);
// min over r of floor(n_r / s_r); 0 when a block is smaller than its share of one batch.
std::int64_t sharded_steps_per_epoch(std::size_t total, int shards, int batch);
// Shard 0 keeps the run's seed (so one shard is the unsharded order); shard r > 0 derives its own.
std::uint64_t shard_seed(std::uint64_t seed, int shard);

// x (n,1,rows,cols) = pixel / 255 and y (n) for the samples indices[0..n): indices in the whole
// set, inside the block the Dataset holds (an index outside it is an error naming the block).
void gather_batch(float* x, std::uint8_t* y, const Dataset& data, const std::uint32_t* indices,
                  int n);
// out[i] = bytes[i] / 255 (torchvision's ToTensor), on the SIMD target of the element-wise kernels.
void pixels_to_unit_floats(float* out, const std::uint8_t* bytes, std::size_t n);

}  // namespace cnnbench
