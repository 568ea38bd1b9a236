// The timing behind `--isa best`: each kernel family runs one LeNet-5 and one FC-3 step's worth of
// its kernels (the models' own shapes) on every target the CPU supports, in turns, so that a
// burst of noise from another process hits every target alike; the fastest repetition counts.
#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/isa_choice.hpp"
#include "cnnbench/layers.hpp"
#include "cnnbench/models.hpp"

namespace cnnbench {

namespace {

// Batch of the timed work: the CLI's default, so that dense takes the same transposes as a run.
constexpr int batch = 64;
// A repetition this much slower than the fastest still ties with it.
constexpr double tie = 1.02;
// A target whose fastest repetition is this much slower than the fastest one is timed no more.
constexpr double out_of_the_race = 1.5;
// The shortest timed repetition: shorter work is repeated up to this.
constexpr double min_repetition_seconds = 200e-6;

using L = Lenet5Sizes;
using F = Fc3Sizes;

// Buffers of one step of both models, filled with values in [-1, 1) (fixed seed: the timing
// must not depend on data, and no kernel here branches on it except ReLU and max-pool).
struct Buffers {
  std::vector<std::vector<float>> floats;
  float* take(std::size_t n) {
    Rng rng(7 + floats.size());
    floats.emplace_back(n);
    for (float& x : floats.back()) x = rng.uniform(-1.0f, 1.0f);
    return floats.back().data();
  }
};

// The dense layers of LeNet-5's head and of FC-3, forward and backward, on the own backend's rules.
std::function<void()> dense_work(Buffers& b) {
  std::vector<std::pair<int, int>> layers = {{L::flat, L::hidden1}, {L::hidden1, L::hidden2},
                                             {L::hidden2, L::classes}, {F::input, F::hidden1},
                                             {F::hidden1, F::hidden2}, {F::hidden2, F::classes}};
  std::vector<std::array<float*, 6>> args;  // inp, weight, bias, out, dinp, dweight
  for (const auto& [in, out] : layers) {
    args.push_back({b.take(std::size_t(batch) * in), b.take(std::size_t(in) * out), b.take(out),
                    b.take(std::size_t(batch) * out), b.take(std::size_t(batch) * in),
                    b.take(std::size_t(in) * out)});
  }
  float* dbias = b.take(1024);
  return [layers, args, dbias] {
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const auto [in, out] = layers[i];
      const auto& a = args[i];
      dense_forward(a[3], a[0], a[1], a[2], batch, in, out);
      dense_backward(a[4], a[5], dbias, a[3], a[0], a[1], batch, in, out);
    }
  };
}

std::function<void()> conv_forward_work(Buffers& b) {
  float* x = b.take(std::size_t(batch) * L::side * L::side);
  float* c1w = b.take(L::c1_channels * 25);
  float* c1b = b.take(L::c1_channels);
  float* a1 = b.take(std::size_t(batch) * L::a1_floats);
  float* p1 = b.take(std::size_t(batch) * L::p1_floats);
  float* c2w = b.take(L::c2_channels * L::c1_channels * 25);
  float* c2b = b.take(L::c2_channels);
  float* a2 = b.take(std::size_t(batch) * L::a2_floats);
  float* scratch = b.take(conv5x5_to16_scratch_floats(L::c1_channels));
  return [=] {
    conv5x5_pad2_relu_forward(a1, x, c1w, c1b, batch, L::c1_channels, L::side, L::side);
    conv5x5_to16_relu_forward(a2, p1, c2w, c2b, batch, L::c1_channels, L::p1_side, L::p1_side,
                              scratch);
  };
}

std::function<void()> conv_backward_work(Buffers& b) {
  float* x = b.take(std::size_t(batch) * L::side * L::side);
  float* da1 = b.take(std::size_t(batch) * L::a1_floats);
  float* dc1w = b.take(L::c1_channels * 25);
  float* dc1b = b.take(L::c1_channels);
  float* p1 = b.take(std::size_t(batch) * L::p1_floats);
  float* dp1 = b.take(std::size_t(batch) * L::p1_floats);
  float* c2w = b.take(L::c2_channels * L::c1_channels * 25);
  float* dc2w = b.take(L::c2_channels * L::c1_channels * 25);
  float* dc2b = b.take(L::c2_channels);
  float* da2 = b.take(std::size_t(batch) * L::a2_floats);
  float* scratch = b.take(conv5x5_to16_scratch_floats(L::c1_channels));
  return [=] {
    conv5x5_to16_backward(dp1, dc2w, dc2b, da2, p1, c2w, batch, L::c1_channels, L::p1_side,
                          L::p1_side, scratch);
    conv5x5_pad2_backward_weights(dc1w, dc1b, da1, x, batch, L::c1_channels, L::side, L::side);
  };
}

std::function<void()> pool_work(Buffers& b) {
  float* a1 = b.take(std::size_t(batch) * L::a1_floats);
  float* p1 = b.take(std::size_t(batch) * L::p1_floats);
  float* da1 = b.take(std::size_t(batch) * L::a1_floats);
  float* a2 = b.take(std::size_t(batch) * L::a2_floats);
  float* p2 = b.take(std::size_t(batch) * L::flat);
  float* da2 = b.take(std::size_t(batch) * L::a2_floats);
  return [=] {
    maxpool2x2_forward(p1, a1, batch * L::c1_channels, L::side, L::side);
    maxpool2x2_channels_last16_forward(p2, a2, batch, L::a2_side, L::a2_side);
    maxpool2x2_relu_channels_last16_backward(da2, p2, a2, batch, L::a2_side, L::a2_side);
    maxpool2x2_relu_backward(da1, p1, a1, batch * L::c1_channels, L::side, L::side);
  };
}

// ReLU over the hidden layers of both models.
std::function<void()> activation_work(Buffers& b) {
  const std::size_t n = std::size_t(batch) * (L::hidden1 + L::hidden2 + F::hidden1 + F::hidden2);
  float* h = b.take(n);
  float* out = b.take(n);
  float* dh = b.take(n);
  return [=] {
    relu_forward(out, h, n);
    relu_backward(dh, h, out, n);
  };
}

// One SGD step over both models' parameters.
std::function<void()> sgd_work(Buffers& b) {
  std::vector<std::pair<float*, float*>> models;
  std::vector<float*> momentum;
  std::vector<std::size_t> sizes;
  for (ModelKind kind : {ModelKind::lenet5, ModelKind::fc3}) {
    const std::size_t n = model_spec(kind).param_count;
    models.emplace_back(b.take(n), b.take(n));
    momentum.push_back(b.take(n));
    sizes.push_back(n);
  }
  return [=] {
    for (std::size_t i = 0; i < models.size(); ++i) {
      sgd_step(models[i].first, models[i].second, momentum[i], sizes[i], SgdConfig{});
    }
  };
}

std::function<void()> family_work(KernelFamily family, Buffers& b) {
  switch (family) {
    case KernelFamily::conv_forward: return conv_forward_work(b);
    case KernelFamily::conv_backward: return conv_backward_work(b);
    case KernelFamily::dense: return dense_work(b);
    case KernelFamily::pool: return pool_work(b);
    case KernelFamily::activation: return activation_work(b);
    case KernelFamily::sgd: return sgd_work(b);
  }
  return [] {};
}

// The fastest of `targets` (highest first) on `family`'s work, ties broken by tied_target_choice.
std::string fastest_target(KernelFamily family, const std::vector<std::string>& targets,
                           const KernelChoice& base, double budget_seconds) {
  Buffers buffers;
  const std::function<void()> work = family_work(family, buffers);
  std::vector<double> fastest(targets.size(), std::numeric_limits<double>::infinity());
  std::vector<bool> running(targets.size(), true);
  KernelChoice trial = base;
  int repeats = 1;  // calls of `work` per timed repetition
  const double start = now_seconds();
  // The first round warms caches and pages and is not counted; then at least two counted rounds.
  for (int round = 0; round < 3 || now_seconds() - start < budget_seconds; ++round) {
    double fastest_warm_up = std::numeric_limits<double>::infinity();
    for (std::size_t t = 0; t < targets.size(); ++t) {
      if (!running[t]) continue;
      trial.targets[static_cast<std::size_t>(family)] = targets[t];
      use_kernel_choice(trial, "best");
      const double begin = now_seconds();
      for (int r = 0; r < repeats; ++r) work();
      const double seconds = (now_seconds() - begin) / repeats;
      if (round > 0) fastest[t] = std::min(fastest[t], seconds);
      fastest_warm_up = std::min(fastest_warm_up, seconds);
    }
    // A family whose work takes microseconds (ReLU, SGD) is repeated up to a span the clock and
    // the scheduler's noise do not swamp.
    if (round == 0) {
      repeats = static_cast<int>(std::clamp(min_repetition_seconds / fastest_warm_up, 1.0, 64.0));
    }
    // A target this far behind in two counted turns cannot win: its turns go to the close ones.
    // (One turn is not enough: a burst of noise can slow the winner's first.)
    const double best = *std::min_element(fastest.begin(), fastest.end());
    for (std::size_t t = 0; t < targets.size() && round >= 2; ++t) {
      if (fastest[t] > best * out_of_the_race) running[t] = false;
    }
  }
  return tied_target_choice(targets, fastest);
}

}  // namespace

int vector_bits(const std::string& target) {
  if (target == "avx3_dl" || target == "avx3") return 512;
  if (target == "avx2") return 256;
  if (target == "scalar") return 0;
  return 128;  // sse4, neon
}

std::string tied_target_choice(const std::vector<std::string>& targets, const std::vector<double>& seconds) {
  CNNBENCH_CHECK(!targets.empty() && targets.size() == seconds.size(), "one time per target");
  const double best = *std::min_element(seconds.begin(), seconds.end());
  std::optional<std::size_t> chosen;
  for (std::size_t t = 0; t < targets.size(); ++t) {
    if (seconds[t] > best * tie) continue;
    const bool narrower = chosen && vector_bits(targets[t]) < vector_bits(targets[*chosen]);
    const bool as_wide_and_faster = chosen && vector_bits(targets[t]) == vector_bits(targets[*chosen]) &&
                                    seconds[t] < seconds[*chosen];
    if (!chosen || narrower || as_wide_and_faster) chosen = t;
  }
  return targets[*chosen];
}

KernelChoice measure_fastest_kernels(double budget_ms) {
  const IsaInfo before = isa_info();
  const double start = now_seconds();
  KernelChoice choice = highest_kernel_choice();
  // Each family gets an even share of what is left, so that one that overran costs the others.
  for (std::size_t f = 0; f < kernel_family_count; ++f) {
    const double left = budget_ms / 1000.0 - (now_seconds() - start);
    choice.targets[f] = fastest_target(kernel_families[f], before.supported, highest_kernel_choice(),
                                       left / double(kernel_family_count - f));
  }
  choice.how = "measured";
  choice.calibration_ms = (now_seconds() - start) * 1000.0;
  use_kernel_choice(before.choice, before.requested);
  return choice;
}

}  // namespace cnnbench
