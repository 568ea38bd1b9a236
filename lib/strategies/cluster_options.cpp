// The cluster strategy's command-line options, read through their specs (strategy_options.cpp).
#include "cnnbench/cluster.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/models.hpp"
#include "strategy_options.hpp"

namespace cnnbench {

Slowdown parse_slowdown(const std::string& value) {
  const PartFactor parsed = parse_part_factor(strategy_option::slowdown, value);
  return {parsed.part, parsed.factor};
}

const char* node_update_name(NodeUpdate update) {
  switch (update) {
    case NodeUpdate::replicas: return "replicas";
    case NodeUpdate::slices: return "slices";
    case NodeUpdate::factors: return "factors";
  }
  return "?";
}

NodeUpdate auto_node_update(ModelKind kind, std::size_t parameters, int ranks, int threads) {
  if (first_layer_dense(kind) && ranks == 1 && threads > 1) return NodeUpdate::factors;
  return parameters * sizeof(float) <= replica_max_bytes ? NodeUpdate::replicas : NodeUpdate::slices;
}

const char* rank_update_name(RankUpdate update) {
  return update == RankUpdate::replicated ? "replicated" : "sharded";
}

ClusterOptions parse_cluster_options(const TrainConfig& config) {
  const StrategyOptions given(config, "cluster");
  ClusterOptions options;
  options.overlap = given.is(strategy_option::overlap, "on");
  options.dynamic_balance = given.is(strategy_option::balance, "dynamic");
  if (const auto slowdown = given.part_factor(strategy_option::slowdown)) {
    options.slow_rank = slowdown->part;
    options.slow_factor = slowdown->factor;
  }
  if (given.is(strategy_option::node_update, "replicas")) options.node_update = NodeUpdate::replicas;
  if (given.is(strategy_option::node_update, "slices")) options.node_update = NodeUpdate::slices;
  if (given.is(strategy_option::node_update, "factors")) options.node_update = NodeUpdate::factors;
  if (given.is(strategy_option::rank_update, "sharded")) options.rank_update = RankUpdate::sharded;
  options.comm_timeout_s = *given.number(strategy_option::comm_timeout);  // it has a default
  CNNBENCH_CHECK(config.threads >= 1, "--threads " + std::to_string(config.threads) +
                                          ": the cluster strategy needs at least 1 thread per rank");
  return options;
}

}  // namespace cnnbench
