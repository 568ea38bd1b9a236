// IDX reading and MNIST loading: valid files round-trip; every kind of corrupt file is rejected
// with the file name and the byte offset of the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"
#include "temp_dir.hpp"

namespace cnnbench {
namespace {

using Bytes = std::vector<std::uint8_t>;

using test::TempDir;

void write_bytes(const std::filesystem::path& file, const Bytes& bytes) {
  std::ofstream out(file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void append_be32(Bytes& bytes, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8)
    bytes.push_back(static_cast<std::uint8_t>(value >> shift));
}

Bytes idx_header(std::vector<std::uint32_t> dims) {
  Bytes bytes = {0x00, 0x00, 0x08, static_cast<std::uint8_t>(dims.size())};
  for (auto d : dims) append_be32(bytes, d);
  return bytes;
}

// Header + prod(dims) bytes of a recognisable pattern.
Bytes idx_file(std::vector<std::uint32_t> dims) {
  Bytes bytes = idx_header(dims);
  std::size_t count = 1;
  for (auto d : dims) count *= d;
  for (std::size_t i = 0; i < count; ++i)
    bytes.push_back(static_cast<std::uint8_t>((i * 37 + 11) % 251));
  return bytes;
}

bool have_gzip() { return std::system("gzip --version >/dev/null 2>&1") == 0; }

void gzip_file(const std::filesystem::path& file) {
  const std::string command = "gzip -f '" + file.string() + "'";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
}

TEST(ReadIdx, ValidFilesRoundTrip) {
  TempDir dir;
  for (const std::vector<std::uint32_t>& dims :
       {std::vector<std::uint32_t>{5}, std::vector<std::uint32_t>{3, 28, 28},
        std::vector<std::uint32_t>{2, 3, 4, 5}}) {
    const auto file = dir.path() / "valid";
    const Bytes bytes = idx_file(dims);
    write_bytes(file, bytes);
    const IdxArray array = read_idx(file, static_cast<int>(dims.size()));
    EXPECT_EQ(array.dims, dims);
    const Bytes data(bytes.begin() + 4 + 4 * static_cast<std::ptrdiff_t>(dims.size()), bytes.end());
    EXPECT_EQ(array.data, data);
  }
}

struct CorruptCase {
  std::string name;
  Bytes bytes;
  int rank;
  std::uint64_t offset;
  std::string message_part;
};

std::vector<CorruptCase> corrupt_cases() {
  std::vector<CorruptCase> cases;
  const Bytes valid = idx_file({2, 4, 4});  // 16-byte header + 32 bytes
  for (int i = 0; i < 2; ++i) {
    Bytes b = valid;
    b[static_cast<std::size_t>(i)] = 0x01;
    cases.push_back(
        {"magic byte " + std::to_string(i), b, 3, static_cast<std::uint64_t>(i), "0x01"});
  }
  {
    Bytes b = valid;
    b[2] = 0x0d;
    cases.push_back({"type float", b, 3, 2, "expected type 0x08 (unsigned byte), found 0x0d"});
  }
  cases.push_back({"wrong rank", idx_file({4}), 3, 3, "expected rank 3, found rank 1"});
  cases.push_back({"zero dimension", idx_file({2, 0, 4}), 3, 8, "found 0"});
  cases.push_back({"empty file", {}, 3, 0, "end of file"});
  cases.push_back({"truncated magic", {0x00, 0x00}, 3, 2, "end of file"});
  cases.push_back(
      {"truncated header", Bytes(valid.begin(), valid.begin() + 10), 3, 10, "end of file"});
  cases.push_back({"truncated data", Bytes(valid.begin(), valid.end() - 1), 3, 47, "48 bytes"});
  {
    Bytes b = valid;
    b.insert(b.end(), {1, 2, 3});
    cases.push_back({"extra bytes", b, 3, 48, "3 extra bytes"});
  }
  {
    // 65536 x 65536 x 1 claims 4 GiB of data in a 20-byte file.
    Bytes b = idx_header({65536, 65536, 1});
    b.insert(b.end(), {1, 2, 3, 4});
    cases.push_back({"huge dims", b, 3, 20, "4294967312 bytes"});
  }
  {
    Bytes b = idx_header({0xffffffffu, 0xffffffffu, 0xffffffffu});
    b.insert(b.end(), {1, 2, 3, 4});
    cases.push_back({"dims overflow 64 bits", b, 3, 20, "more than 2^64 bytes"});
  }
  return cases;
}

TEST(ReadIdx, CorruptFilesNameFileAndOffset) {
  TempDir dir;
  for (const CorruptCase& c : corrupt_cases()) {
    SCOPED_TRACE(c.name);
    const auto file = dir.path() / "train-images-idx3-ubyte";
    write_bytes(file, c.bytes);
    try {
      read_idx(file, c.rank);
      ADD_FAILURE() << "accepted a file with " << c.name;
    } catch (const FormatError& e) {
      const std::string message = e.what();
      EXPECT_EQ(e.offset(), c.offset) << message;
      EXPECT_EQ(e.file(), file);
      EXPECT_NE(
          message.find(file.string() + ": at byte " + std::to_string(c.offset) + ": expected "),
          std::string::npos)
          << message;
      EXPECT_NE(message.find(c.message_part), std::string::npos) << message;
    }
  }
}

TEST(ReadIdx, MissingFileIsAnError) {
  TempDir dir;
  EXPECT_THROW(read_idx(dir.path() / "absent", 1), Error);
}

TEST(ReadIdx, GzipFilesRoundTripAndAreValidated) {
  if (!have_gzip()) GTEST_SKIP() << "gzip is not installed";
  TempDir dir;
  const auto file = dir.path() / "t10k-images-idx3-ubyte";
  const Bytes bytes = idx_file({3, 28, 28});
  write_bytes(file, bytes);
  gzip_file(file);
  const IdxArray array = read_idx(dir.path() / "t10k-images-idx3-ubyte.gz", 3);
  EXPECT_EQ(array.dims, (std::vector<std::uint32_t>{3, 28, 28}));
  EXPECT_EQ(array.data, Bytes(bytes.begin() + 16, bytes.end()));

  for (const CorruptCase& c : corrupt_cases()) {
    SCOPED_TRACE(c.name);
    const auto corrupt = dir.path() / "corrupt";
    const auto compressed = dir.path() / "corrupt.gz";
    write_bytes(corrupt, c.bytes);
    gzip_file(corrupt);
    try {
      read_idx(compressed, c.rank);
      ADD_FAILURE() << "accepted a compressed file with " << c.name;
    } catch (const FormatError& e) {
      EXPECT_EQ(e.file(), compressed);
      // Offsets count decompressed bytes; a stream cannot know its size before reading it, so
      // short data is reported where it ended.
      EXPECT_NE(std::string(e.what()).find(compressed.string()), std::string::npos) << e.what();
    }
  }
}

TEST(ReadIdx, CorruptGzipIsAnError) {
  if (!have_gzip()) GTEST_SKIP() << "gzip is not installed";
  TempDir dir;
  const auto file = dir.path() / "labels";
  write_bytes(file, idx_file({5000}));
  gzip_file(file);
  const auto compressed = dir.path() / "labels.gz";
  const auto size = std::filesystem::file_size(compressed);
  std::filesystem::resize_file(compressed, size / 2);
  try {
    read_idx(compressed, 1);
    ADD_FAILURE() << "accepted a truncated .gz file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(compressed.string()), std::string::npos) << e.what();
  }
}

// A small MNIST-shaped folder: n images of 28x28 and n labels.
void write_mnist(const std::filesystem::path& dir, const std::string& prefix, Bytes labels,
                 std::uint32_t rows = 28) {
  write_bytes(dir / (prefix + "-images-idx3-ubyte"),
              idx_file({static_cast<std::uint32_t>(labels.size()), rows, 28}));
  Bytes label_file = idx_header({static_cast<std::uint32_t>(labels.size())});
  label_file.insert(label_file.end(), labels.begin(), labels.end());
  write_bytes(dir / (prefix + "-labels-idx1-ubyte"), label_file);
}

// load_mnist(dir, split) must throw a FormatError, which check() then looks at; `accepted` says
// what it should not have accepted.
template <class Check>
void expect_mnist_format_error(const std::filesystem::path& dir, Split split,
                               const std::string& accepted, Check check) {
  try {
    load_mnist(dir, split);
    ADD_FAILURE() << accepted;
  } catch (const FormatError& e) {
    check(e);
  }
}

TEST(LoadMnist, ReadsBothSplits) {
  TempDir dir;
  write_mnist(dir.path(), "train", {3, 1, 4, 1, 5});
  write_mnist(dir.path(), "t10k", {9, 2});
  const Dataset train = load_mnist(dir.path(), Split::train);
  EXPECT_EQ(train.count, 5u);
  EXPECT_EQ(train.labels, (Bytes{3, 1, 4, 1, 5}));
  EXPECT_EQ(train.images.size(), 5u * 28 * 28);
  const Bytes expected_images = idx_file({5, 28, 28});
  EXPECT_EQ(train.images, Bytes(expected_images.begin() + 16, expected_images.end()));
  EXPECT_NE(train.source.find("train-images-idx3-ubyte"), std::string::npos);
  const Dataset test = load_mnist(dir.path(), Split::test);
  EXPECT_EQ(test.count, 2u);
  EXPECT_EQ(test.labels, (Bytes{9, 2}));
}

TEST(LoadMnist, LabelAboveNineNamesFileAndOffset) {
  TempDir dir;
  write_mnist(dir.path(), "train", {3, 1, 4, 10, 5});
  expect_mnist_format_error(
      dir.path(), Split::train, "accepted label 10", [&](const FormatError& e) {
        EXPECT_EQ(e.file(), dir.path() / "train-labels-idx1-ubyte");
        EXPECT_EQ(e.offset(), 8u + 3u);
        EXPECT_NE(std::string(e.what()).find("found 10"), std::string::npos) << e.what();
      });
}

TEST(LoadMnist, RejectsMismatchedCountsAndSizes) {
  TempDir dir;
  write_mnist(dir.path(), "train", {1, 2, 3});
  Bytes labels = idx_header({2});
  labels.insert(labels.end(), {1, 2});
  write_bytes(dir.path() / "train-labels-idx1-ubyte", labels);
  expect_mnist_format_error(dir.path(), Split::train, "accepted 3 images with 2 labels",
                            [&](const FormatError& e) {
                              EXPECT_EQ(e.file(), dir.path() / "train-labels-idx1-ubyte");
                              EXPECT_EQ(e.offset(), 4u);
                            });

  write_mnist(dir.path(), "t10k", {1, 2}, 27);
  expect_mnist_format_error(dir.path(), Split::test, "accepted 27x28 images",
                            [&](const FormatError& e) {
                              EXPECT_EQ(e.file(), dir.path() / "t10k-images-idx3-ubyte");
                              EXPECT_EQ(e.offset(), 8u);
                            });
}

TEST(LoadMnist, MissingFilesSayHowToFetch) {
  TempDir dir;
  write_mnist(dir.path(), "train", {1, 2});
  std::filesystem::remove(dir.path() / "train-labels-idx1-ubyte");
  try {
    load_mnist(dir.path(), Split::train);
    ADD_FAILURE() << "loaded without a labels file";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("train-labels-idx1-ubyte"), std::string::npos) << message;
    EXPECT_NE(message.find("datasets/fetch_mnist.sh"), std::string::npos) << message;
    EXPECT_NE(message.find("--synthetic"), std::string::npos) << message;
  }
  try {
    load_mnist(dir.path() / "nowhere", Split::test);
    ADD_FAILURE() << "loaded from a missing folder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nowhere"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("datasets/fetch_mnist.sh"), std::string::npos) << e.what();
  }
}

TEST(LoadMnist, ReadsGzipFiles) {
  if (!have_gzip()) GTEST_SKIP() << "gzip is not installed";
  TempDir dir;
  write_mnist(dir.path(), "t10k", {7, 0, 7});
  gzip_file(dir.path() / "t10k-images-idx3-ubyte");
  gzip_file(dir.path() / "t10k-labels-idx1-ubyte");
  const Dataset test = load_mnist(dir.path(), Split::test);
  EXPECT_EQ(test.labels, (Bytes{7, 0, 7}));
  EXPECT_NE(test.source.find(".gz"), std::string::npos);
}

// ---- blocks of a file (--shard-data) ---------------------------------------------------------------

TEST(ReadIdxBlock, EqualsTheSliceOfTheWholeRead) {
  TempDir dir;
  const auto file = dir.path() / "images";
  write_bytes(file, idx_file({11, 3, 2}));
  const IdxArray whole = read_idx(file, 3);
  const bool gzip = have_gzip();
  if (gzip) {
    write_bytes(dir.path() / "copy", idx_file({11, 3, 2}));
    gzip_file(dir.path() / "copy");
  }
  for (const int blocks : {1, 2, 3, 4, 11}) {
    for (int block = 0; block < blocks; ++block) {
      SCOPED_TRACE("block " + std::to_string(block) + " of " + std::to_string(blocks));
      const DataBlock range = data_block(11, blocks, block);
      const Bytes slice(whole.data.begin() + static_cast<std::ptrdiff_t>(range.first * 6),
                        whole.data.begin() + static_cast<std::ptrdiff_t>((range.first + range.count) * 6));
      const IdxArray part = read_idx_block(file, 3, blocks, block);
      EXPECT_EQ(part.dims, whole.dims);
      EXPECT_EQ(part.data, slice);
      if (gzip) {
        EXPECT_EQ(read_idx_block(dir.path() / "copy.gz", 3, blocks, block).data, slice);
      }
    }
  }
}

TEST(ReadIdxBlock, ValidatesTheWholeFileAsReadIdxDoes) {
  TempDir dir;
  for (const CorruptCase& c : corrupt_cases()) {
    SCOPED_TRACE(c.name);
    const auto file = dir.path() / "train-images-idx3-ubyte";
    write_bytes(file, c.bytes);
    try {
      read_idx_block(file, c.rank, 2, 1);
      ADD_FAILURE() << "accepted a file with " << c.name;
    } catch (const FormatError& e) {
      EXPECT_EQ(e.file(), file);
      EXPECT_NE(std::string(e.what()).find(c.message_part), std::string::npos) << e.what();
    }
  }
  if (!have_gzip()) return;
  // A stream is checked to its end even though the block comes first: extra or missing bytes.
  for (const int change : {-1, +3}) {
    Bytes bytes = idx_file({4, 2, 2});
    bytes.resize(static_cast<std::size_t>(static_cast<int>(bytes.size()) + change), 9);
    write_bytes(dir.path() / "changed", bytes);
    gzip_file(dir.path() / "changed");
    EXPECT_THROW(read_idx_block(dir.path() / "changed.gz", 3, 2, 0), FormatError) << change;
  }
}

TEST(LoadMnistBlock, NamesItsBlockAndTheWholeSet) {
  TempDir dir;
  write_mnist(dir.path(), "train", {1, 2, 3, 4, 5});
  const Dataset whole = load_mnist(dir.path(), Split::train);
  const Dataset block = load_mnist_block(dir.path(), Split::train, 2, 1);  // samples [3, 5)
  EXPECT_EQ(block.first, 3u);
  EXPECT_EQ(block.count, 2u);
  EXPECT_EQ(block.total, 5u);
  EXPECT_EQ(block.labels, (Bytes{4, 5}));
  EXPECT_EQ(block.images, Bytes(whole.images.begin() + 3 * 784, whole.images.end()));
  EXPECT_EQ(block.source, whole.source);
  EXPECT_NE(block.block_source.find("bytes [2368, 3936)"), std::string::npos) << block.block_source;
}

// A shard folder as datasets/shard.sh writes it, its manifest as given.
void write_shard(const std::filesystem::path& set, int block, const std::string& manifest,
                 Bytes labels) {
  const auto folder = set / ("shard-" + std::to_string(block));
  std::filesystem::create_directories(folder);
  write_mnist(folder, "train", std::move(labels));
  std::ofstream(folder / "block.txt") << manifest;
}

TEST(LoadMnistShardFolder, ReadsItsBlockAndRefusesOtherJobsFolders) {
  TempDir dir;
  const auto set = dir.path() / "set";
  write_shard(set, 0, "blocks 2\nblock 0\nfirst 0\ncount 3\ntotal 5\n", {1, 2, 3});
  write_shard(set, 1, "# a comment\nblocks 2\nblock 1\nfirst 3\ncount 2\ntotal 5\n", {4, 5});
  ASSERT_TRUE(is_shard_folder_set(set));
  EXPECT_FALSE(is_shard_folder_set(dir.path()));
  const Dataset block = load_mnist_shard_folder(set, 2, 1);
  EXPECT_EQ(block.first, 3u);
  EXPECT_EQ(block.total, 5u);
  EXPECT_EQ(block.labels, (Bytes{4, 5}));

  const auto refused = [&](int blocks, int index, const std::string& part) {
    try {
      load_mnist_shard_folder(set, blocks, index);
      ADD_FAILURE() << "block " << index << " of " << blocks << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  refused(3, 0, "block.txt: expected blocks (the job's ranks) 3, found 2");
  refused(3, 2, "has no block.txt: write 3 shards with datasets/shard.sh 3");
  write_shard(set, 1, "blocks 2\nblock 0\nfirst 3\ncount 2\ntotal 5\n", {4, 5});
  refused(2, 1, "expected block 1, found 0");
  write_shard(set, 1, "blocks 2\nblock 1\nfirst 2\ncount 3\ntotal 5\n", {3, 4, 5});
  refused(2, 1, "expected first 3, found 2");
  write_shard(set, 1, "blocks 2\nblock 1\nfirst 3\ncount 2\ntotal 5\n", {4, 5, 6});
  refused(2, 1, "the IDX files hold 3 samples, block.txt says 2");
  write_shard(set, 1, "blocks 2\nblock 1\nfirst three\ncount 2\ntotal 5\n", {4, 5});
  refused(2, 1, "line 3: expected 'first <whole number>'");
  write_shard(set, 1, "blocks 2\nblock 1\ncount 2\ntotal 5\n", {4, 5});
  refused(2, 1, "no 'first' line");
}

}  // namespace
}  // namespace cnnbench
