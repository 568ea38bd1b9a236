// The prediction of each measured cluster point of a sweep from the communication model.
#include "cnnbench/cluster_prediction.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cnnbench/cluster.hpp"
#include "cnnbench/collective_model.hpp"
#include "cnnbench/models.hpp"

namespace cnnbench {

namespace {

double step_of(const PointRecord& p) { return p.time.median / static_cast<double>(p.steps.value_or(1)); }

std::vector<double> schedule_of(const PointRecord& p) {
  const nlohmann::json& allreduce = p.strategy_metrics.value("allreduce", nlohmann::json::object());
  const nlohmann::json& schedule = allreduce.value("schedule_bytes", nlohmann::json());
  if (schedule.is_array() && !schedule.empty()) return schedule.get<std::vector<double>>();
  return allreduce_schedule_bytes(parse_model(p.model), p.strategy_metrics.value("overlap_active", true));
}

// The serial step's optimizer update, which every rank of a cluster runs over all parameters
// whatever its share of the batch (0 when the serial point measured no breakdown).
double update_of(const PointRecord& serial) {
  const nlohmann::json& t = serial.time_breakdown;
  if (!t.is_object() || !t.contains("update_s") || !t.contains("steps") || t.at("steps").get<double>() <= 0) return 0;
  return t.at("update_s").get<double>() / t.at("steps").get<double>();
}

std::string transport_of(const PointRecord& p) {
  const nlohmann::json& network = p.strategy_metrics.value("network", nlohmann::json::object());
  const nlohmann::json& transport = network.is_object() ? network.value("transport", nlohmann::json()) : nlohmann::json();
  return transport.is_string() ? transport.get<std::string>() : "";
}

// The share of a core each thread of the point gets where all its ranks run on this machine
// (one host's shared memory, or emulated hosts): the machine's cores over the point's threads.
double core_share_of(const SweepRecord& sweep, const PointRecord& p) {
  const nlohmann::json& network = sweep.config.value("network", nlohmann::json::object());
  const bool emulated = network.is_object() && network.contains("emulated_hosts");
  const nlohmann::json& cores = sweep.context.value("cores", nlohmann::json());
  if ((!emulated && transport_of(p) != "shm") || !cores.is_number_integer() || cores.get<int>() < 1) return 1;
  return std::min(1.0, cores.get<double>() / (static_cast<double>(p.nodes) * p.cores));
}

// The sweep's allreduce-bench times by message size, where they price the point's own call: the
// bench ran the in-place MPI_Iallreduce (--nonblocking) of the algorithm the point's libnbc was
// asked for, on as many ranks as the point has. Empty otherwise (an older, blocking bench; other
// ranks; another algorithm).
std::map<double, double> measured_curve(const nlohmann::json& allreduce, const PointRecord& p,
                                        AllreduceAlgorithm asked) {
  std::map<double, double> curve;
  if (!allreduce.is_object() || allreduce.value("ranks", 0) != p.nodes || !allreduce.value("nonblocking", false) ||
      allreduce.value("algorithm_asked", std::string()) != algorithm_name(asked) ||
      !allreduce.contains("sizes") || !allreduce.at("sizes").is_array()) {
    return curve;
  }
  for (const nlohmann::json& size : allreduce.at("sizes")) {
    const double bytes = size.value("bytes", 0.0), seconds = size.value("seconds", 0.0);
    if (bytes > 0 && seconds > 0) curve[bytes] = seconds;
  }
  if (curve.size() < 2) curve.clear();
  return curve;
}

// The time of `bytes` on the curve: linear in log-log between the measured sizes around it; past
// either end, the end's time scaled by the bytes.
double on_curve(const std::map<double, double>& curve, double bytes) {
  const auto above = curve.lower_bound(bytes);
  if (above == curve.end()) return std::prev(above)->second * bytes / std::prev(above)->first;
  if (above->first == bytes) return above->second;
  if (above == curve.begin()) return above->second * bytes / above->first;
  const auto below = std::prev(above);
  const double f = std::log(bytes / below->first) / std::log(above->first / below->first);
  return std::exp(std::log(below->second) + f * std::log(above->second / below->second));
}

// The tbf bucket of the sweep's emulated links where they are capped (sweep --emulate-hosts N
// --rate R): what scripts/emulate-hosts.sh sets up.
std::optional<TokenBucket> token_bucket_of(const SweepRecord& sweep) {
  const nlohmann::json& network = sweep.config.value("network", nlohmann::json::object());
  if (!network.is_object() || !network.contains("emulated_hosts")) return std::nullopt;
  const nlohmann::json& rate = network.value("rate", nlohmann::json());
  const std::optional<double> bits = rate.is_string() ? parse_tc_rate(rate.get<std::string>()) : std::nullopt;
  if (!bits) return std::nullopt;
  return TokenBucket{tbf_burst_bytes(*bits), *bits / 8};
}

}  // namespace

std::optional<CollectiveCost> allreduce_report_link(const nlohmann::json& allreduce) {
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
  const std::optional<CollectiveCost> link = allreduce_report_link(sweep.allreduce);
  if (!link || link->link.beta_s_per_byte <= 0) return;
  const std::string profile = "allreduce-bench of this sweep, " +
                              std::to_string(sweep.allreduce.at("ranks").get<int>()) + " ranks";
  for (PointRecord& p : sweep.points) {
    if (p.strategy != "cluster" || p.nodes < 2 || p.cores != 1 || !p.measured() || !p.strategy_metrics.is_object()) continue;
    const PointRecord* serial = sweep.find_measured(p.model + "/serial/n1c1");
    if (serial == nullptr) continue;
    StepModel model;
    model.serial_step_s = step_of(*serial);
    // Replicated, every rank runs the whole update; sharded, each its 1/nodes of it, as the rest.
    const bool sharded = p.strategy_metrics.value("rank-update", "replicated") == "sharded";
    model.replicated_s = sharded ? 0.0 : std::min(update_of(*serial), 0.5 * model.serial_step_s);
    model.core_share = core_share_of(sweep, p);
    model.bucket_bytes = schedule_of(p);
    // In shared memory the rank's own core copies and sums its allreduce (inside the tests it makes
    // between layers), so none of it hides behind that core's backward; over a network the link
    // moves the bytes while the core computes, and the run's measured hidden share holds.
    const bool shared_memory = transport_of(p) == "shm";
    const nlohmann::json& overlap = p.strategy_metrics.value("overlap_detail", nlohmann::json::object());
    model.hidden_fraction = shared_memory ? 0.0 : std::clamp(overlap.value("hidden_fraction", 0.0), 0.0, 1.0);
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
    StepPrediction predicted = predict_step(model, Scaling::strong, fabric);
    // Where the sweep's bench timed the point's own call on its ranks, its times price the buckets
    // (the fitted line misses mid sizes by up to half in shared memory); else the link model does.
    const std::map<double, double> curve = measured_curve(sweep.allreduce, p, model.iallreduce_asked);
    if (!curve.empty()) {
      predicted.communication_s = 0;
      for (double bytes : model.bucket_bytes) predicted.communication_s += on_curve(curve, bytes);
      predicted.exposed_s = (1 - model.hidden_fraction) * predicted.communication_s;
      predicted.step_s = predicted.compute_s + predicted.exposed_s;
    }
    // A capped emulated link gathers tokens while it idles, up to its bucket: while the rank
    // computes, less what of the communication runs hidden under that compute. What the tokens
    // cover of the bytes each rank sends (2 (p - 1) / p of the gradient on the ring) goes at the
    // link's own speed, taken as free: the tune's planner counts the same, allreduce by allreduce.
    // Without it LeNet-5 over 2 emulated 1gbit hosts with overlap off was predicted 41% slow.
    double covered_bytes = 0;
    if (const std::optional<TokenBucket> bucket = token_bucket_of(sweep)) {
      double bytes = 0;
      for (double b : model.bucket_bytes) bytes += b;
      const double sent = 2.0 * (p.nodes - 1) / p.nodes * bytes;
      const double idle = std::max(0.0, predicted.compute_s - model.hidden_fraction * predicted.communication_s);
      covered_bytes = std::min({bucket->burst_bytes, bucket->rate_bytes_per_s * idle, sent});
      if (sent > 0) predicted.communication_s *= 1 - covered_bytes / sent;
      predicted.exposed_s = (1 - model.hidden_fraction) * predicted.communication_s;
      predicted.step_s = predicted.compute_s + predicted.exposed_s;
    }
    const double measured = step_of(p);
    p.prediction = {{"predicted_step_s", predicted.step_s},
                    {"measured_step_s", measured},
                    {"relative_error", (predicted.step_s - measured) / measured},
                    {"algorithm", predicted.algorithm},
                    {"algorithm_rule", rule_name(model.rule)},
                    {"hidden_fraction", model.hidden_fraction},
                    {"hidden_rule", shared_memory ? "shared memory: none hidden" : "measured"},
                    {"compute_s", predicted.compute_s},
                    {"replicated_s", model.replicated_s},
                    {"core_share", model.core_share},
                    {"communication_s", predicted.communication_s},
                    {"communication_from", curve.empty() ? "link fit" : "bench times"},
                    {"token_bucket_bytes", covered_bytes},
                    {"profile", profile}};
  }
}

}  // namespace cnnbench
