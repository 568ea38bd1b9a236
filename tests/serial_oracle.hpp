// The oracle the data-parallel strategies' tests hold a run against: plain mini-batch SGD on one
// thread, the whole batch at once, over synthetic data and the epochs' orders laid end to end.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cnnbench/data.hpp"
#include "cnnbench/models.hpp"
#include "equivalence.hpp"

namespace cnnbench::testing {

struct SerialRun {
  std::string model = "fc3";
  int batch = 32, steps = 50;
  std::size_t dataset_size = 512;
  std::uint64_t data_seed = 3, init_seed = 11, order_seed = 5;
};

// The samples of `steps` global batches: epochs' orders laid end to end.
inline std::vector<std::uint32_t> step_order(const SerialRun& run) {
  std::vector<std::uint32_t> order;
  for (std::int64_t epoch = 0; order.size() < static_cast<std::size_t>(run.steps) * run.batch;
       ++epoch) {
    const auto e = epoch_order(run.dataset_size, run.order_seed, epoch, true);
    order.insert(order.end(), e.begin(), e.end());
  }
  return order;
}

struct Trained {
  std::vector<float> params, momentum;
  std::vector<double> losses;  // mean loss of each step's batch
};

inline Trained train_serially(const SerialRun& run) {
  const ModelKind kind = parse_model(run.model);
  const Dataset data = make_synthetic(run.dataset_size, run.data_seed);
  Model model(kind);
  init_params(model.params, kind, run.init_seed);
  Workspace workspace(kind, run.batch);
  std::vector<float> x(static_cast<std::size_t>(run.batch) * data.image_size());
  std::vector<std::uint8_t> y(static_cast<std::size_t>(run.batch));
  const auto order = step_order(run);
  const SgdConfig sgd;
  Trained result;
  for (int step = 0; step < run.steps; ++step) {
    gather_batch(x.data(), y.data(), data,
                 order.data() + static_cast<std::ptrdiff_t>(step) * run.batch, run.batch);
    std::fill(model.grads.begin(), model.grads.end(), 0.0f);
    const double loss = forward_backward(kind, model.params.data(), model.grads.data(), x.data(),
                                         y.data(), run.batch, 1.0f / run.batch, workspace);
    sgd_step(model.params.data(), model.grads.data(), model.momentum.data(), model.params.size(),
             sgd);
    result.losses.push_back(loss / run.batch);
  }
  result.params.assign(model.params.begin(), model.params.end());
  result.momentum.assign(model.momentum.begin(), model.momentum.end());
  return result;
}

// The oracle's next step after `run` (step number run.steps, on its samples) from `from`: what a
// strategy's one step from the same state is held against (equivalence.hpp).
inline ModelState serial_step_after(const SerialRun& run, const ModelState& from,
                                    const SgdConfig& sgd = {}) {
  SerialRun longer = run;
  longer.steps = run.steps + 1;
  const auto order = step_order(longer);
  const Dataset data = make_synthetic(run.dataset_size, run.data_seed);
  return serial_step_from(parse_model(run.model), from, data,
                          order.data() + static_cast<std::ptrdiff_t>(run.steps) * run.batch,
                          run.batch, sgd);
}

}  // namespace cnnbench::testing
