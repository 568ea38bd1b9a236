// Per-node data blocks end to end: a cluster job whose ranks each read only their own block
// (--shard-data) trains the model that one process trains with the same sample order
// (--shards N; the loss curve, then one step from the cluster's checkpoint: equivalence.hpp): on
// synthetic data for both models, and on MNIST from byte ranges of the IDX
// files and from the folders datasets/shard.sh writes. The report records the blocks and every
// rank's peak memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cnnbench/core.hpp"
#include "mpirun_job.hpp"
#include "../equivalence.hpp"
#include "../temp_dir.hpp"

namespace cnnbench {
namespace {

namespace fs = std::filesystem;

// Runs a command to completion (120 s at most) and expects exit status 0.
void run_ok(const std::vector<std::string>& args, const fs::path& log) {
  const pid_t pid = test::spawn_logged(args, {}, log);
  const test::Ended ended = test::wait_for(pid, 120);
  ASSERT_TRUE(ended.in_time && ended.exit_code == 0)
      << args[0] << " ... exited " << ended.exit_code << ":\n" << read_file(log);
}

std::vector<std::string> train(const std::vector<std::string>& data, const std::string& model,
                               const std::vector<std::string>& extra, int steps = 50) {
  std::vector<std::string> args = {CNNBENCH_CLI, "train", "--model", model, "--batch", "32",
                                   "--steps", std::to_string(steps), "--quiet"};
  args.insert(args.end(), data.begin(), data.end());
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Trains with --shards 2 on one process and with --shard-data on 2 ranks; the loss curves agree,
// and so does one more step that both take from the cluster's checkpoint.
void compare_sharded_runs(const fs::path& dir, const std::string& name,
                          const std::vector<std::string>& serial_data,
                          const std::vector<std::string>& cluster_data, const std::string& model) {
  const fs::path cluster = dir / (name + "-cluster.safetensors");
  const auto file = [&](const std::string& suffix) { return (dir / (name + suffix)).string(); };
  run_ok(train(serial_data, model, {"--shards", "2", "--report", file("-serial.json")}),
         file("-serial.log"));
  run_ok(test::mpirun_command(2, train(cluster_data, model,
                                       {"--strategy", "cluster", "--shard-data", "--save",
                                        cluster.string(), "--report", file(".json")})),
         file("-cluster.log"));
  run_ok(train(serial_data, model,
               {"--shards", "2", "--resume", cluster.string(), "--save", file("-serial-step.safetensors")},
               51),
         file("-serial-step.log"));
  run_ok(test::mpirun_command(2, train(cluster_data, model,
                                       {"--strategy", "cluster", "--shard-data", "--resume",
                                        cluster.string(), "--save", file("-cluster-step.safetensors")},
                                       51)),
         file("-cluster-step.log"));
  testing::expect_cli_runs_equivalent(file(".json"), file("-serial.json"), cluster,
                                      file("-cluster-step.safetensors"),
                                      file("-serial-step.safetensors"), parse_model(model),
                                      name + " (--shard-data on 2 ranks vs --shards 2)");
}

TEST(ShardData, TwoRanksOnTheirOwnBlocksEqualTheShardsOrderOnOneProcess) {
  const fs::path dir = test::fresh_temp_dir_of_process("shard-data-", "synthetic");
  const std::vector<std::string> data = {"--synthetic", "2000"};
  for (const std::string model : {"fc3", "lenet5"}) {
    SCOPED_TRACE(model);
    compare_sharded_runs(dir, model, data, data, model);
  }
  // The report says which samples each rank held and each rank's peak memory.
  const auto report = nlohmann::json::parse(read_file(dir / "fc3.json"));
  const auto& config = report.at("config");
  EXPECT_EQ(config.at("shards"), 2);
  EXPECT_EQ(config.at("shard_data"), true);
  EXPECT_EQ(config.at("data").at("train_samples"), 2000);
  const auto& blocks = config.at("data").at("blocks");
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[1].at("first"), 1000);
  EXPECT_EQ(blocks[1].at("count"), 1000);
  EXPECT_EQ(blocks[1].at("source"), "samples [1000, 2000) of the sequence");
  const auto& rss = report.at("metrics").at("peak_rss_bytes_by_rank");
  ASSERT_EQ(rss.size(), 2u);
  EXPECT_GT(rss[1].get<std::uint64_t>(), 0u);
}

TEST(ShardData, MnistFromByteRangesAndFromShardFolders) {
  const fs::path mnist = fs::path(CNNBENCH_SOURCE_DIR) / "datasets/mnist";
  if (!fs::exists(mnist / "train-images-idx3-ubyte")) {
    if (std::getenv("CI")) FAIL() << "MNIST is missing in CI: run datasets/fetch_mnist.sh";
    GTEST_SKIP() << "MNIST not fetched (datasets/fetch_mnist.sh)";
  }
  const fs::path dir = test::fresh_temp_dir_of_process("shard-data-", "mnist");
  const std::vector<std::string> whole = {"--data", mnist.string()};
  compare_sharded_runs(dir, "ranges", whole, whole, "fc3");
  const auto report = nlohmann::json::parse(read_file(dir / "ranges.json"));
  const std::string source = report.at("config").at("data").at("blocks")[1].at("source");
  EXPECT_NE(source.find("bytes [23520016, 47040016) of "), std::string::npos) << source;

  const fs::path shards = dir / "shards";
  const std::string script = std::string(CNNBENCH_SOURCE_DIR) + "/datasets/shard.sh --from '" +
                             mnist.string() + "' 2 '" + shards.string() + "' >/dev/null";
  ASSERT_EQ(std::system(script.c_str()), 0) << script;
  compare_sharded_runs(dir, "folders", whole, {"--data", shards.string()}, "fc3");
  // A folder set written for two ranks is refused by a job of three, naming the manifest.
  const fs::path log = dir / "three.log";
  const pid_t pid = test::spawn_logged(
      test::mpirun_command(3, train({"--data", shards.string()}, "fc3",
                                    {"--strategy", "cluster", "--shard-data", "--oversubscribe"})),
      {}, log);
  const test::Ended ended = test::wait_for(pid, 60);
  EXPECT_TRUE(ended.in_time && ended.exit_code != 0) << read_file(log);
  EXPECT_NE(read_file(log).find("expected blocks (the job's ranks) 3, found 2"), std::string::npos)
      << read_file(log);
}

}  // namespace
}  // namespace cnnbench
