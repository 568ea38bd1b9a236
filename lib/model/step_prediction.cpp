// A training step's time on a fabric from the collective costs (cnnbench/collective_model.hpp).
#include "cnnbench/collective_model.hpp"

#include <string>
#include <utility>

#include "cnnbench/core.hpp"
#include "cnnbench/link_simulation.hpp"

namespace cnnbench {

namespace {

// What Open MPI runs unforced over every rank of the fabric (the network's cost: its worst link).
AllreduceChoice open_mpi_allreduce(const StepModel& model, const HierarchicalFabric& fabric, double bytes) {
  const int ranks = fabric.nodes * fabric.ranks_per_node;
  const AllreduceAlgorithm run = algorithm_by_rule(model.rule, ranks, bytes, fabric.network, model.iallreduce_asked);
  return {std::string(algorithm_name(run)), allreduce_seconds(run, ranks, bytes, fabric.network)};
}

StepPrediction predict_step_on(const StepModel& model, Scaling scaling, const HierarchicalFabric& fabric) {
  StepPrediction out;
  out.nodes = fabric.nodes;
  const double divided = model.serial_step_s - model.replicated_s;
  out.compute_s = (scaling == Scaling::strong ? divided / fabric.nodes + model.replicated_s : model.serial_step_s) /
                  model.core_share;
  double largest = 0;
  for (double bytes : model.bucket_bytes) {
    const AllreduceChoice choice = model.rule == AllreduceRule::cheapest
                                       ? cheapest_allreduce(fabric, bytes)
                                       : open_mpi_allreduce(model, fabric, bytes);
    out.communication_s += choice.seconds;
    if (bytes >= largest) {
      largest = bytes;
      out.algorithm = choice.algorithm;
    }
  }
  out.exposed_s = out.communication_s * (1 - model.hidden_fraction);
  out.step_s = out.compute_s + out.exposed_s;
  out.efficiency = scaling == Scaling::strong ? model.serial_step_s / (fabric.nodes * out.step_s)
                                              : model.serial_step_s / out.step_s;
  return out;
}

}  // namespace

StepPrediction predict_step(const StepModel& model, Scaling scaling, const HierarchicalFabric& fabric) {
  CNNBENCH_CHECK(model.serial_step_s > 0, "step prediction needs a positive serial step time");
  CNNBENCH_CHECK(model.hidden_fraction >= 0 && model.hidden_fraction <= 1,
                 "step prediction: the hidden fraction must lie in [0, 1], got " +
                     std::to_string(model.hidden_fraction));
  CNNBENCH_CHECK(model.replicated_s >= 0 && model.replicated_s < model.serial_step_s,
                 "step prediction: the replicated work must lie in [0, serial step), got " +
                     std::to_string(model.replicated_s));
  CNNBENCH_CHECK(model.core_share > 0 && model.core_share <= 1,
                 "step prediction: the core share must lie in (0, 1], got " + std::to_string(model.core_share));
  if (!fabric.token_bucket || !fabric.uncapped) return predict_step_on(model, scaling, fabric);
  CNNBENCH_CHECK(fabric.ranks_per_node == 1, "step prediction over a token bucket: one rank per node only");
  StepPrediction out = predict_step_on(model, scaling, fabric);  // compute, algorithm
  StarNetwork star;
  star.hosts = fabric.nodes;
  star.link = *fabric.uncapped;
  star.shaping = ShapedLink{fabric.token_bucket->rate_bytes_per_s, fabric.token_bucket->burst_bytes};
  std::vector<std::pair<AllreduceAlgorithm, double>> allreduces;
  for (double bytes : model.bucket_bytes) {
    allreduces.emplace_back(algorithm_by_rule(model.rule, fabric.nodes, bytes, star.link, model.iallreduce_asked), bytes);
  }
  out.communication_s = simulate_steps(star, out.compute_s, allreduces).communication_s;
  out.exposed_s = (1 - model.hidden_fraction) * out.communication_s;
  out.step_s = out.compute_s + out.exposed_s;
  out.efficiency = scaling == Scaling::strong ? model.serial_step_s / (fabric.nodes * out.step_s)
                                              : model.serial_step_s / out.step_s;
  out.simulated = true;
  return out;
}

std::optional<int> nodes_below_half_efficiency(const StepModel& model, Scaling scaling,
                                               HierarchicalFabric fabric, int max_nodes) {
  for (int nodes = 2; nodes <= max_nodes; ++nodes) {
    fabric.nodes = nodes;
    if (predict_step(model, scaling, fabric).efficiency < 0.5) return nodes;
  }
  return std::nullopt;
}

}  // namespace cnnbench
