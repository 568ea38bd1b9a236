// MNIST from its four IDX files, whole or one block of them: finds the raw or .gz file, checks
// images and labels agree.
#include <string>

#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"

namespace cnnbench {

namespace {

constexpr int kMnistSide = 28;

std::filesystem::path find_idx_file(const std::filesystem::path& dir, const std::string& name) {
  const std::filesystem::path raw = dir / name;
  if (std::filesystem::exists(raw)) return raw;
  std::filesystem::path compressed = dir / (name + ".gz");
  if (std::filesystem::exists(compressed)) return compressed;
  const std::string fix = "run datasets/fetch_mnist.sh " + dir.string() + " (or use --synthetic N)";
  if (!std::filesystem::is_directory(dir)) {
    fail("MNIST folder " + dir.string() + " does not exist: " + fix);
  }
  fail("MNIST file " + raw.string() + " (or " + compressed.filename().string() +
       ") is missing: " + fix);
}

// The whole split (blocks == 1, read_idx) or one block of it (read_idx_block).
Dataset load_mnist_part(const std::filesystem::path& dir, Split split, int blocks, int block) {
  const std::string prefix = split == Split::train ? "train" : "t10k";
  const std::filesystem::path images_file = find_idx_file(dir, prefix + "-images-idx3-ubyte");
  const std::filesystem::path labels_file = find_idx_file(dir, prefix + "-labels-idx1-ubyte");
  const bool whole = blocks == 1;
  const auto read = [&](const std::filesystem::path& file, int rank) {
    return whole ? read_idx(file, rank) : read_idx_block(file, rank, blocks, block);
  };

  IdxArray images = read(images_file, 3);
  if (images.dims[1] != kMnistSide) {
    throw FormatError(images_file, 8, "28 rows", std::to_string(images.dims[1]) + " rows");
  }
  if (images.dims[2] != kMnistSide) {
    throw FormatError(images_file, 12, "28 columns", std::to_string(images.dims[2]) + " columns");
  }
  IdxArray labels = read(labels_file, 1);
  if (labels.dims[0] != images.dims[0]) {
    throw FormatError(labels_file, 4,
                      std::to_string(images.dims[0]) + " labels (one per image in " +
                          images_file.filename().string() + ")",
                      std::to_string(labels.dims[0]) + " labels");
  }
  const DataBlock range = data_block(labels.dims[0], blocks, block);
  for (std::size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] > 9) {
      throw FormatError(labels_file, 8 + range.first + i, "label 0..9",
                        std::to_string(labels.data[i]));
    }
  }

  Dataset data;
  data.count = range.count;
  data.rows = kMnistSide;
  data.cols = kMnistSide;
  data.images = std::move(images.data);
  data.labels = std::move(labels.data);
  data.source = images_file.string() + " + " + labels_file.string();
  if (!whole) {
    constexpr std::size_t image_bytes = kMnistSide * kMnistSide;
    const auto bytes = [](std::size_t header, std::size_t item, const DataBlock& r) {
      return "bytes [" + std::to_string(header + r.first * item) + ", " +
             std::to_string(header + (r.first + r.count) * item) + ")";
    };
    data.first = range.first;
    data.total = labels.dims[0];
    // A .gz file's offsets count decompressed bytes.
    const auto of = [](const std::filesystem::path& file) {
      return (file.extension() == ".gz" ? " of decompressed " : " of ") + file.string();
    };
    data.block_source = bytes(16, image_bytes, range) + of(images_file) + " + " +
                        bytes(8, 1, range) + of(labels_file);
  }
  return data;
}

}  // namespace

Dataset load_mnist(const std::filesystem::path& dir, Split split) {
  return load_mnist_part(dir, split, 1, 0);
}

Dataset load_mnist_block(const std::filesystem::path& dir, Split split, int blocks, int block) {
  return load_mnist_part(dir, split, blocks, block);
}

}  // namespace cnnbench
