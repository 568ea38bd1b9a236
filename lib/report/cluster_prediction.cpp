// The prediction of each measured cluster point of a sweep from the communication model.
#include "cnnbench/cluster_prediction.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "cnnbench/cluster.hpp"
#include "cnnbench/collective_model.hpp"
#include "cnnbench/models.hpp"

namespace cnnbench {

namespace {

double step_of(const PointRecord& p) { return p.time.median / static_cast<double>(p.steps.value_or(1)); }

// The link behind the sweep's allreduce fit: allreduce-bench's own inversion (fit.link) when the
// report has it, else its one line read as a ring without arithmetic (older reports).
std::optional<CollectiveCost> sweep_link(const nlohmann::json& allreduce) {
  if (!allreduce.is_object() || !allreduce.contains("fit") || !allreduce.at("fit").is_object()) return std::nullopt;
  const nlohmann::json& fit = allreduce.at("fit");
  if (fit.contains("link")) {
    const nlohmann::json& link = fit.at("link");
    return CollectiveCost{{link.at("alpha_s"), link.at("beta_s_per_byte")}, link.at("gamma_s_per_byte")};
  }
  const int ranks = allreduce.at("ranks");
  if (ranks < 2) return std::nullopt;
  return CollectiveCost{link_cost_from_fit(AllreduceAlgorithm::ring, ranks, fit.at("alpha_s"),
                                           fit.at("beta_s_per_byte"), 0),
                        0};
}

std::vector<double> schedule_of(const PointRecord& p) {
  const nlohmann::json& allreduce = p.strategy_metrics.value("allreduce", nlohmann::json::object());
  const nlohmann::json& schedule = allreduce.value("schedule_bytes", nlohmann::json());
  if (schedule.is_array() && !schedule.empty()) return schedule.get<std::vector<double>>();
  return allreduce_schedule_bytes(parse_model(p.model), p.strategy_metrics.value("overlap_active", true));
}

}  // namespace

AllreduceAlgorithm iallreduce_asked(const nlohmann::json& strategy_metrics) {
  const nlohmann::json& allreduce = strategy_metrics.value("allreduce", nlohmann::json::object());
  const nlohmann::json& id = allreduce.value("iallreduce_algorithm_id", nlohmann::json());
  if (id.is_null()) return AllreduceAlgorithm::open_mpi_default;
  if (!id.is_number_integer()) {
    fail("allreduce.iallreduce_algorithm_id " + id.dump() + ": not an Open MPI libnbc algorithm id");
  }
  return libnbc_algorithm_from_id(id.get<int>());
}

void add_cluster_predictions(SweepRecord& sweep) {
  const std::optional<CollectiveCost> link = sweep_link(sweep.allreduce);
  if (!link || link->link.beta_s_per_byte <= 0) return;
  const std::string profile = "allreduce-bench of this sweep, " +
                              std::to_string(sweep.allreduce.at("ranks").get<int>()) + " ranks";
  for (PointRecord& p : sweep.points) {
    if (p.strategy != "cluster" || p.nodes < 2 || p.cores != 1 || !p.measured() || !p.strategy_metrics.is_object()) continue;
    const PointRecord* serial = sweep.find_measured(p.model + "/serial/n1c1");
    if (serial == nullptr) continue;
    StepModel model;
    model.serial_step_s = step_of(*serial);
    model.bucket_bytes = schedule_of(p);
    const nlohmann::json& overlap = p.strategy_metrics.value("overlap_detail", nlohmann::json::object());
    model.hidden_fraction = std::clamp(overlap.value("hidden_fraction", 0.0), 0.0, 1.0);
    model.rule = AllreduceRule::open_mpi_iallreduce_in_place;  // as the cluster strategy calls it
    try {
      model.iallreduce_asked = iallreduce_asked(p.strategy_metrics);
    } catch (const Error&) {
      p.prediction = nullptr;  // an algorithm the model does not know: no prediction, not a failed sweep
      continue;
    }
    HierarchicalFabric fabric;
    fabric.nodes = p.nodes;
    fabric.network = *link;
    const StepPrediction predicted = predict_step(model, Scaling::strong, fabric);
    const double measured = step_of(p);
    p.prediction = {{"predicted_step_s", predicted.step_s},
                    {"measured_step_s", measured},
                    {"relative_error", (predicted.step_s - measured) / measured},
                    {"algorithm", predicted.algorithm},
                    {"algorithm_rule", rule_name(model.rule)},
                    {"hidden_fraction", model.hidden_fraction},
                    {"profile", profile}};
  }
}

}  // namespace cnnbench
