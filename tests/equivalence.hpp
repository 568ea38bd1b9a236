// How a run that sums in another order than serial (another strategy or shape, another kernel
// target, another reduction order) is held against serial after many steps (docs/design.md,
// "Equivalence after many steps"). Float32 cannot promise that the two runs' weights agree after
// 50 steps: rounding moves them ~1e-7 apart, and once in a while that drift moves a ReLU input or
// a max-pool pair across its decision; that step's gradient then differs by ~1e-3 and momentum
// carries it (1.5e-2 apart after 50 steps, seen). So the check has two parts:
//   (a) the loss curves agree step by step within loss_curve_tolerance (relative);
//   (b) one more step, taken by both from the same state (the run's weights and momentum), gives
//       weights and momentum within one_step_tolerance per tensor (max|a-b| / max|b|): from the
//       same weights the two differ only by rounding.
// Where the order is the same by design (reruns, ranks agreeing), tests compare bits instead.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cnnbench/checkpoint.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"
#include "cnnbench/models.hpp"
#include "tensor_compare.hpp"

namespace cnnbench::testing {

// Measured on an AVX-512 machine over the stream, cluster and many-core tests, with the kernels
// on each of scalar, sse4, avx2, avx3, avx3_dl and a mixed choice (dense scalar, the rest
// avx3_dl): the worst loss difference of a step was 2.1e-7 (a flip moves a loss far less than
// momentum), so 1e-4 is loose on purpose: the curve is there to catch a run gone elsewhere.
inline constexpr double loss_curve_tolerance = 1e-4;
// One step from the same weights and momentum, per tensor: the worst seen was 7.0e-7, the
// momentum of LeNet-5's c1.bias (6 sums over 28 x 28 positions of every sample, which cancel) on
// one rank of 12 threads with scalar kernels; weights stayed within 1.1e-7. 1e-6 would leave a
// margin of 1.4, too little for other seeds and other CPUs' kernels, so 5e-6: still far below
// the ~1e-3 of a flipped decision or a wrong step.
inline constexpr double one_step_tolerance = 5e-6;

// Weights and momentum: what a checkpoint holds and what a strategy starts from.
struct ModelState {
  std::vector<float> params, momentum;
};

inline ModelState state_of(const Model& model) {
  return {{model.params.begin(), model.params.end()},
          {model.momentum.begin(), model.momentum.end()}};
}

inline Model model_from(ModelKind kind, const ModelState& state) {
  Model model(kind);
  std::copy(state.params.begin(), state.params.end(), model.params.begin());
  std::copy(state.momentum.begin(), state.momentum.end(), model.momentum.begin());
  return model;
}

inline ModelState read_checkpoint_state(const std::filesystem::path& file, ModelKind kind) {
  Model model(kind);
  load_checkpoint(file, model);
  return state_of(model);
}

// The mean loss of every step in a run report ("loss_curve").
inline std::vector<double> report_loss_curve(const std::filesystem::path& report) {
  return nlohmann::json::parse(read_file(report)).at("loss_curve").get<std::vector<double>>();
}

// (a) Every step's loss within `tolerance` of the reference's, relative; prints the worst step.
inline void expect_loss_curves_close(std::span<const double> got, std::span<const double> want,
                                     const std::string& what,
                                     double tolerance = loss_curve_tolerance) {
  ASSERT_EQ(got.size(), want.size()) << what << ": steps in the loss curves";
  ASSERT_FALSE(want.empty()) << what << ": empty loss curve";
  double worst = 0;
  std::size_t worst_step = 0;
  for (std::size_t s = 0; s < want.size(); ++s) {
    const double relative = std::abs(got[s] - want[s]) / std::max(std::abs(want[s]), 1e-30);
    if (!(relative <= worst)) {  // NaN counts as worst
      worst = relative;
      worst_step = s;
    }
  }
  EXPECT_LE(worst, tolerance) << what << ": loss of step " << worst_step << " is "
                              << got[worst_step] << ", the reference's " << want[worst_step];
  std::cout << "[ info ] " << what << ": loss curve of " << want.size() << " steps within "
            << worst << " (step " << worst_step << ")\n";
}

// The oracle's step from `from`: mini-batch SGD on one thread over the `batch` samples at
// `samples`, the whole batch at once.
inline ModelState serial_step_from(ModelKind kind, const ModelState& from, const Dataset& data,
                                   const std::uint32_t* samples, int batch,
                                   const SgdConfig& sgd = {}) {
  set_blas_threads(1);  // as every strategy runs it
  Model model = model_from(kind, from);
  Workspace workspace(kind, batch);
  std::vector<float> x(static_cast<std::size_t>(batch) * data.image_size());
  std::vector<std::uint8_t> y(static_cast<std::size_t>(batch));
  gather_batch(x.data(), y.data(), data, samples, batch);
  std::fill(model.grads.begin(), model.grads.end(), 0.0f);
  forward_backward(kind, model.params.data(), model.grads.data(), x.data(), y.data(), batch,
                   1.0f / static_cast<float>(batch), workspace);
  sgd_step(model.params.data(), model.grads.data(), model.momentum.data(), model.params.size(),
           sgd);
  return state_of(model);
}

// (b) The states after one step from the same state: weights and momentum within `tolerance`
// per tensor; prints the worst tensor of each.
inline void expect_one_step_close(const ModelState& got, const ModelState& want, ModelKind kind,
                                  const std::string& what,
                                  double tolerance = one_step_tolerance) {
  expect_tensors_close(got.params, want.params, kind, tolerance, what + ", one step from the same state");
  expect_tensors_close(got.momentum, want.momentum, kind, tolerance,
                       what + ", one step from the same state", "momentum.");
  const TensorDifference weights = largest_tensor_difference(got.params, want.params, kind);
  const TensorDifference momentum = largest_tensor_difference(got.momentum, want.momentum, kind);
  std::cout << "[ info ] " << what << ": one step from the same state: weights within "
            << weights.relative << " (" << weights.tensor << "), momentum within "
            << momentum.relative << " (" << momentum.tensor << ")\n";
}

// Two CLI runs held against each other: (a) the loss curves of their reports, then (b) the
// checkpoints each saved after one more step from the same checkpoint `start` (--resume).
inline void expect_cli_runs_equivalent(const std::filesystem::path& got_report,
                                       const std::filesystem::path& want_report,
                                       const std::filesystem::path& start,
                                       const std::filesystem::path& got_step,
                                       const std::filesystem::path& want_step, ModelKind kind,
                                       const std::string& what,
                                       double one_step = one_step_tolerance) {
  expect_loss_curves_close(report_loss_curve(got_report), report_loss_curve(want_report), what);
  const ModelState got = read_checkpoint_state(got_step, kind);
  EXPECT_NE(got.params, read_checkpoint_state(start, kind).params)
      << what << ": the step from " << start.filename() << " changed nothing";
  expect_one_step_close(got, read_checkpoint_state(want_step, kind), kind, what, one_step);
}

}  // namespace cnnbench::testing
