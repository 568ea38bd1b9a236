// A training set written beforehand as one folder per block (datasets/shard.sh N DIR): each
// process reads its own folder, after checking that the folder's manifest names its block.
#include <fstream>
#include <map>
#include <string>

#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"

namespace cnnbench {

namespace {

std::filesystem::path shard_folder(const std::filesystem::path& dir, int block) {
  return dir / ("shard-" + std::to_string(block));
}

std::filesystem::path manifest_of(const std::filesystem::path& folder) {
  return folder / "block.txt";
}

// block.txt: "key value" lines (blocks, block, first, count, total); '#' starts a comment.
std::map<std::string, std::size_t> read_manifest(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) fail("cannot read " + file.string() + ": write the shards with datasets/shard.sh N DIR");
  std::map<std::string, std::size_t> values;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    const std::size_t space = line.find(' ');
    const std::string key = line.substr(0, space);
    const std::string value = space == std::string::npos ? "" : line.substr(space + 1);
    std::size_t used = 0;
    std::size_t number_value = 0;
    try {
      number_value = std::stoull(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (value.empty() || used != value.size() || value[0] == '-') {
      fail(file.string() + " line " + std::to_string(number) + ": expected '" + key +
           " <whole number>', found '" + line + "'");
    }
    values[key] = number_value;
  }
  for (const char* key : {"blocks", "block", "first", "count", "total"}) {
    if (values.count(key) == 0) fail(file.string() + ": no '" + key + "' line");
  }
  return values;
}

}  // namespace

bool is_shard_folder_set(const std::filesystem::path& dir) {
  std::error_code error;
  return std::filesystem::is_regular_file(manifest_of(shard_folder(dir, 0)), error);
}

Dataset load_mnist_shard_folder(const std::filesystem::path& dir, int blocks, int block) {
  const std::filesystem::path folder = shard_folder(dir, block);
  const std::filesystem::path manifest = manifest_of(folder);
  if (!std::filesystem::is_regular_file(manifest)) {
    fail("shard folder " + folder.string() + " (block " + std::to_string(block) + " of " +
         std::to_string(blocks) + ") has no block.txt: write " + std::to_string(blocks) +
         " shards with datasets/shard.sh " + std::to_string(blocks) + " " + dir.string());
  }
  const std::map<std::string, std::size_t> says = read_manifest(manifest);
  const auto mismatch = [&](const std::string& what, std::size_t expected, std::size_t found) {
    fail(manifest.string() + ": expected " + what + " " + std::to_string(expected) + ", found " +
         std::to_string(found) + " (the shards were written for another job: rewrite them with "
         "datasets/shard.sh " + std::to_string(blocks) + " " + dir.string() + ")");
  };
  if (says.at("blocks") != static_cast<std::size_t>(blocks)) {
    mismatch("blocks (the job's ranks)", static_cast<std::size_t>(blocks), says.at("blocks"));
  }
  if (says.at("block") != static_cast<std::size_t>(block)) {
    mismatch("block", static_cast<std::size_t>(block), says.at("block"));
  }
  const DataBlock range = data_block(says.at("total"), blocks, block);
  if (says.at("first") != range.first) mismatch("first", range.first, says.at("first"));
  if (says.at("count") != range.count) mismatch("count", range.count, says.at("count"));

  Dataset data = load_mnist(folder, Split::train);
  if (data.count != range.count) {
    fail(folder.string() + ": the IDX files hold " + std::to_string(data.count) +
         " samples, block.txt says " + std::to_string(range.count));
  }
  data.first = range.first;
  data.total = says.at("total");
  data.block_source = data.source;
  data.source = dir.string() + " (" + std::to_string(blocks) + " shard folders of " +
                std::to_string(data.total) + " samples)";
  return data;
}

}  // namespace cnnbench
