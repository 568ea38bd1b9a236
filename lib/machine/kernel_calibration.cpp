// The timing behind `--isa best`: each kernel family runs one LeNet-5 and one FC-3 step's worth of
// its kernels (the models' own shapes) on every candidate target in paired rounds against the
// default (the highest target), so that a slow period of the machine hits every target alike; the
// default timed twice a round measures the noise, and a round the OS interrupted is not counted.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/isa_choice.hpp"
#include "cnnbench/layers.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/quantile.hpp"
#include "cnnbench/step_timeline.hpp"

namespace cnnbench {

namespace {

// Batch of the timed work: the CLI's default, so that dense takes the same transposes as a run.
constexpr int batch = 64;
// A target whose median ratio to the default is above this after a few rounds is timed no more.
constexpr double out_of_the_race = 1.5;
// The shortest timed repetition: shorter work is repeated up to this.
constexpr double min_repetition_seconds = 1e-3;
// A timing in which the thread ran on its core less than this share of the wall time was
// disturbed (the OS ran something else there): its round is not counted.
constexpr double undisturbed_cpu_share = 0.97;

using L = Lenet5Sizes;
using F = Fc3Sizes;

// Buffers of one step of both models, filled with values in [-1, 1) (fixed seed: the timing
// must not depend on data, and no kernel here branches on it except ReLU and max-pool), 64-byte
// aligned as the models' own buffers are. Misaligned ones (std::vector's 16 bytes) made every
// 512-bit access of SGD cross a cache line, so AVX2 won SGD by 10-14% here that it does not win
// in a step, and a loaded machine, which hides that margin, chose differently.
struct Buffers {
  std::vector<aligned_vector<float>> floats;
  float* take(std::size_t n) {
    Rng rng(7 + floats.size());
    floats.emplace_back(n);
    for (float& x : floats.back()) x = rng.uniform(-1.0f, 1.0f);
    return floats.back().data();
  }
};

// The dense layers of LeNet-5's head and of FC-3, forward and backward, on the own backend.
std::function<void()> dense_work(Buffers& b) {
  const std::vector<std::pair<int, int>> layers{
      {L::flat, L::hidden1}, {L::hidden1, L::hidden2}, {L::hidden2, L::classes},
      {F::input, F::hidden1}, {F::hidden1, F::hidden2}, {F::hidden2, F::classes}};
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

// One timing of `work` (`repeats` calls) on the calling thread: seconds per call, and whether
// the OS kept the thread off its core for a noticeable part of it.
struct Timing {
  double seconds = 0;
  bool disturbed = false;
};
Timing time_work(const std::function<void()>& work, int repeats) {
  const ThreadCpu cpu_before = thread_cpu();
  const double begin = now_seconds();
  for (int r = 0; r < repeats; ++r) work();
  const double wall = now_seconds() - begin;
  const double cpu = thread_cpu().seconds - cpu_before.seconds;
  return {wall / repeats, cpu < undisturbed_cpu_share * wall};
}

// `family`'s rounds on `targets` (the default first), for `budget_seconds` and at least
// min_counted_rounds counted rounds, or up to twice the budget while rounds are disturbed.
FamilyCalibration calibrate_family(KernelFamily family, const std::vector<std::string>& targets,
                                   const KernelChoice& base, double budget_seconds) {
  Buffers buffers;
  const std::function<void()> work = family_work(family, buffers);
  KernelChoice trial = base;
  const auto use = [&](const std::string& target) {
    trial.targets[static_cast<std::size_t>(family)] = target;
    use_kernel_choice(trial, "best");
  };
  // A warm-up of each target (caches, pages) sizes the repetition.
  double fastest_warm_up = std::numeric_limits<double>::infinity();
  for (const std::string& target : targets) {
    use(target);
    fastest_warm_up = std::min(fastest_warm_up, time_work(work, 1).seconds);
  }
  const int repeats = static_cast<int>(std::clamp(min_repetition_seconds / fastest_warm_up, 1.0, 256.0));

  // Slot 0 and slot n are the default; 1..n-1 the other targets. The order rotates by a round.
  const std::size_t slots = targets.size() + 1;
  std::vector<double> self_ratios;
  std::vector<CandidateRounds> candidates(targets.size() - 1);
  for (std::size_t t = 1; t < targets.size(); ++t) candidates[t - 1].target = targets[t];
  std::vector<bool> running(targets.size(), true);
  int disturbed = 0;
  const double start = now_seconds();
  for (std::size_t round = 0;; ++round) {
    const double elapsed = now_seconds() - start;
    const bool enough = int(self_ratios.size()) >= min_counted_rounds;
    if ((enough && elapsed >= budget_seconds) || elapsed >= 2 * budget_seconds) break;
    std::vector<double> seconds(slots, 0.0);
    bool round_disturbed = false;
    for (std::size_t k = 0; k < slots; ++k) {
      const std::size_t slot = (k + round) % slots;
      const std::size_t target = slot == slots - 1 ? 0 : slot;
      if (!running[target]) continue;
      use(targets[target]);
      const Timing timing = time_work(work, repeats);
      seconds[slot] = timing.seconds;
      round_disturbed = round_disturbed || timing.disturbed;
    }
    if (round_disturbed) {
      ++disturbed;
      continue;
    }
    const double reference = 0.5 * (seconds[0] + seconds[slots - 1]);
    self_ratios.push_back(seconds[slots - 1] / seconds[0]);
    for (std::size_t t = 1; t < targets.size(); ++t) {
      if (running[t]) candidates[t - 1].ratios.push_back(seconds[t] / reference);
    }
    // A target far behind in three counted rounds cannot win: its turns go to the close ones.
    for (std::size_t t = 1; t < targets.size() && self_ratios.size() >= 3; ++t) {
      if (running[t] && median(candidates[t - 1].ratios, 1.0) > out_of_the_race) running[t] = false;
    }
  }
  FamilyCalibration result = decide_family_target(family, targets.front(), self_ratios, candidates);
  result.disturbed_rounds = disturbed;
  return result;
}

}  // namespace

FamilyCalibration decide_family_target(KernelFamily family, const std::string& default_target,
                                       const std::vector<double>& self_ratios,
                                       const std::vector<CandidateRounds>& candidates) {
  FamilyCalibration out;
  out.family = family;
  out.default_target = default_target;
  out.chosen = default_target;
  out.counted_rounds = static_cast<int>(self_ratios.size());
  std::vector<double> deviations;
  for (double r : self_ratios) deviations.push_back(std::abs(r - 1));
  out.noise = self_ratios.empty() ? 0 : quantile(deviations, 0.75);
  for (const CandidateRounds& c : candidates) {
    out.margins.push_back({c.target, median(c.ratios, 1.0), quantile(c.ratios, 0.75, 1.0)});
  }
  out.decided = out.counted_rounds >= min_counted_rounds && out.noise <= busy_noise;
  if (!out.decided) return out;
  const double threshold =
      1 - std::max(win_margin, 2 * out.noise / std::sqrt(double(out.counted_rounds)));
  double best = threshold;
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    const TargetMargin& m = out.margins[c];
    // A target timed in only a few rounds was out of the race: it cannot win.
    if (candidates[c].ratios.size() < self_ratios.size()) continue;
    if (m.median_ratio < best && m.upper_quartile_ratio < 1) {
      best = m.median_ratio;
      out.chosen = m.target;
    }
  }
  return out;
}

std::vector<std::string> calibration_candidates(const std::vector<std::string>& supported) {
  std::vector<std::string> candidates;
  for (const std::string& target : supported) {
    if (target != "scalar") candidates.push_back(target);
  }
  return candidates.empty() ? supported : candidates;
}

Calibration calibrate_kernels(double budget_ms) {
  const IsaInfo before = isa_info();
  // One thread of OpenBLAS, as a serial run has: a target that hands dense layers to sgemm would
  // otherwise time OpenBLAS's threads on the other cores (151x the default beside a busy core).
  const int blas_threads_before = blas_threads();
  set_blas_threads(1);
  const double start = now_seconds();
  Calibration calibration;
  calibration.choice = highest_kernel_choice();
  const std::vector<std::string> targets = calibration_candidates(before.supported);
  bool busy = false;
  // Each family gets an even share: one that a disturbed period stretched costs no other its
  // rounds (a busy machine takes up to twice the budget in all).
  for (std::size_t f = 0; f < kernel_family_count; ++f) {
    FamilyCalibration family = calibrate_family(kernel_families[f], targets, highest_kernel_choice(),
                                                budget_ms / 1000.0 / double(kernel_family_count));
    busy = busy || !family.decided;
    calibration.choice.targets[f] = family.chosen;
    calibration.families.push_back(std::move(family));
  }
  if (busy) calibration.choice = highest_kernel_choice();
  calibration.choice.how = busy ? "busy" : "measured";
  calibration.choice.calibration_ms = (now_seconds() - start) * 1000.0;
  calibration.choice.measured_at = utc_now_iso8601();
  use_kernel_choice(before.choice, before.requested);
  set_blas_threads(blas_threads_before);
  return calibration;
}

nlohmann::json calibration_json(const Calibration& calibration) {
  nlohmann::json families = nlohmann::json::object();
  for (const FamilyCalibration& f : calibration.families) {
    nlohmann::json margins = nlohmann::json::object();
    for (const TargetMargin& m : f.margins) {
      margins[m.target] = {{"median_ratio", m.median_ratio},
                           {"upper_quartile_ratio", m.upper_quartile_ratio}};
    }
    families[kernel_family_name(f.family)] = {{"chosen", f.chosen},
                                              {"default", f.default_target},
                                              {"decided", f.decided},
                                              {"noise", f.noise},
                                              {"counted_rounds", f.counted_rounds},
                                              {"disturbed_rounds", f.disturbed_rounds},
                                              {"margins", margins}};
  }
  return families;
}

}  // namespace cnnbench
