// Which points a sweep measures, in which order, and how much memory each would need.
#include <algorithm>
#include <string>

#include "cnnbench/core.hpp"
#include "cnnbench/sweep.hpp"
#include "cnnbench/train.hpp"

namespace cnnbench {

std::string PointSpec::id() const {
  return std::string(model_name(model)) + "/" + strategy + "/n" + std::to_string(nodes) + "c" +
         std::to_string(cores) + (variant.empty() ? "" : "/" + variant);
}

std::string trace_file_name(const PointSpec& point) {
  std::string name = point.id();
  std::replace(name.begin(), name.end(), '/', '-');
  return name + ".json";
}

std::vector<PointSpec> plan_points(const SweepOptions& options, const std::vector<int>& cores,
                                   const std::vector<int>& nodes, int machine_cores) {
  std::vector<std::string> strategies = options.strategies;
  if (strategies.empty()) {
    for (const auto& s : list_strategies()) strategies.push_back(s.name);
  }
  std::vector<PointSpec> points;
  // Serial baselines first: every speedup divides by them.
  for (ModelKind model : options.models) points.push_back({model, "serial", 1, 1});
  for (ModelKind model : options.models) {
    for (const std::string& strategy : strategies) {
      if (strategy == "serial") continue;
      if (strategy == "blas" || strategy == "stream" || strategy == "pytorch") {
        for (int c : cores) points.push_back({model, strategy, c, 1});
      } else if (strategy == "cluster") {
        // Nodes x threads per node, except combinations that would need more cores than the
        // machine has (the pure node axis, one thread per rank, is always kept).
        for (int n : nodes) {
          for (int c : cores) {
            if (c == 1 || n == 1 || n * c <= machine_cores) points.push_back({model, strategy, c, n});
          }
        }
      } else if (strategy == "pytorch-ddp") {
        for (int n : nodes) points.push_back({model, strategy, 1, n});  // one thread per rank
      } else {
        points.push_back({model, strategy, 1, 1});  // gpu and strategies without a core count
      }
    }
  }
  return points;
}

std::uint64_t estimate_point_bytes(const PointSpec& point, int batch, std::size_t train_samples,
                                   std::size_t test_samples) {
  const ModelSpec& spec = model_spec(point.model);
  // Floats of activations (forward values, their gradients, im2col scratch) per image: a rough
  // upper bound, doubled for the micro-batches a pipeline keeps in flight.
  const double activation_floats = point.model == ModelKind::fc3 ? 2.0 * 1604 : 2.0 * 50000;
  const double data_bytes = static_cast<double>(train_samples + test_samples) * (28 * 28 + 1);
  const double per_worker =
      4.0 * (3.0 * static_cast<double>(spec.param_count) + 2.0 * batch * activation_floats);
  const double runtime_bytes = 64.0 * 1024 * 1024;  // code, MPI and allocator overhead per process
  const double per_rank = data_bytes + point.cores * per_worker + 4.0 * 4 * spec.param_count + runtime_bytes;
  return static_cast<std::uint64_t>(per_rank * point.nodes);
}

}  // namespace cnnbench
