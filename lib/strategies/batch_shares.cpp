// The cluster strategy's command-line options (--overlap, --balance, --slowdown); --slowdown is
// the stream strategy's too.
#include <cmath>
#include <stdexcept>

#include "cnnbench/cluster.hpp"
#include "cnnbench/core.hpp"

namespace cnnbench {

namespace {

[[noreturn]] void bad_option(const std::string& flag, const std::string& value,
                             const std::string& expected) {
  fail("--" + flag + " " + value + ": expected " + expected);
}

}  // namespace

Slowdown parse_slowdown(const std::string& value) {
  const std::string expected = "N:FACTOR, e.g. 1:2 (rank or stream copy 1 computes 2x slower)";
  Slowdown options;
  const auto colon = value.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == value.size()) {
    bad_option("slowdown", value, expected);
  }
  try {
    std::size_t used = 0;
    const std::string rank_text = value.substr(0, colon);
    options.part = std::stoi(rank_text, &used);
    if (used != rank_text.size() || options.part < 0) bad_option("slowdown", value, expected);
    const std::string factor_text = value.substr(colon + 1);
    options.factor = std::stod(factor_text, &used);
    if (used != factor_text.size()) bad_option("slowdown", value, expected);
  } catch (const std::logic_error&) {  // stoi/stod: not a number or out of range
    bad_option("slowdown", value, expected);
  }
  if (!std::isfinite(options.factor) || options.factor < 1.0 || options.factor > 1000.0) {
    bad_option("slowdown", value, "a FACTOR between 1 and 1000 in N:FACTOR");
  }
  return options;
}

ClusterOptions parse_cluster_options(const TrainConfig& config) {
  ClusterOptions options;
  for (const auto& [key, value] : config.options) {
    if (key == "overlap") {
      if (value != "on" && value != "off") bad_option(key, value, "on or off");
      options.overlap = value == "on";
    } else if (key == "balance") {
      if (value != "static" && value != "dynamic") bad_option(key, value, "static or dynamic");
      options.dynamic_balance = value == "dynamic";
    } else if (key == "slowdown") {
      const Slowdown slowdown = parse_slowdown(value);
      options.slow_rank = slowdown.part;
      options.slow_factor = slowdown.factor;
    } else {
      fail("--" + key + " does not apply to --strategy cluster (its options: --overlap on|off, "
           "--balance static|dynamic, --slowdown RANK:FACTOR)");
    }
  }
  CNNBENCH_CHECK(config.threads >= 1, "--threads " + std::to_string(config.threads) +
                                          ": the cluster strategy needs at least 1 thread per rank");
  return options;
}

}  // namespace cnnbench
