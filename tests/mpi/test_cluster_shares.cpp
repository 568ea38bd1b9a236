// How the cluster strategy reads its options; no mpirun needed (the shares: test_balance).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "cnnbench/cluster.hpp"
#include "cnnbench/core.hpp"

namespace cnnbench {
namespace {

TrainConfig with_options(std::map<std::string, std::string> options) {
  TrainConfig config;
  config.options = std::move(options);
  return config;
}

TEST(ClusterOptions, DefaultsAndValidValues) {
  const ClusterOptions defaults = parse_cluster_options(with_options({}));
  EXPECT_TRUE(defaults.overlap);
  EXPECT_FALSE(defaults.dynamic_balance);
  EXPECT_EQ(defaults.slow_rank, -1);
  const ClusterOptions set =
      parse_cluster_options(with_options({{"overlap", "off"}, {"balance", "dynamic"}, {"slowdown", "1:2.5"}}));
  EXPECT_FALSE(set.overlap);
  EXPECT_TRUE(set.dynamic_balance);
  EXPECT_EQ(set.slow_rank, 1);
  EXPECT_DOUBLE_EQ(set.slow_factor, 2.5);
}

void expect_error_naming(const std::map<std::string, std::string>& options, const std::string& flag) {
  try {
    parse_cluster_options(with_options(options));
    ADD_FAILURE() << "accepted " << flag;
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(flag), std::string::npos) << error.what();
  }
}

TEST(ClusterOptions, InvalidValuesNameTheFlag) {
  expect_error_naming({{"overlap", "yes"}}, "--overlap");
  expect_error_naming({{"balance", "fair"}}, "--balance");
  for (const char* bad : {"1", ":2", "1:", "a:2", "1:b", "-1:2", "1:0.5", "1:2x", "1:nan"}) {
    expect_error_naming({{"slowdown", bad}}, "--slowdown");
  }
  expect_error_naming({{"consistency", "strict"}}, "--consistency");
  TrainConfig no_threads;
  no_threads.threads = 0;
  EXPECT_THROW(parse_cluster_options(no_threads), Error);
}

}  // namespace
}  // namespace cnnbench
