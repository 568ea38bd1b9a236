// SGD as PyTorch does it (g += wd*p; v = mu*v + g; p -= lr*v), alone or on the sum of several
// gradient buffers, compiled once per SIMD target: plain loops the compiler vectorises for it.
// Built as ISO C++ (no -ffp-contract=fast), so no target fuses a multiply and an add: every
// target steps to the same bits.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "models/sgd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#ifndef CNNBENCH_MODELS_SGD_ONCE
#define CNNBENCH_MODELS_SGD_ONCE
#include <algorithm>
#include <cstddef>

#include "cnnbench/core.hpp"
#include "cnnbench/models.hpp"
#endif

HWY_BEFORE_NAMESPACE();
namespace cnnbench::HWY_NAMESPACE {

namespace {

void step(float* __restrict__ params, const float* __restrict__ grads,
          float* __restrict__ momentum, std::size_t n, float lr, float mu, float wd) {
  for (std::size_t i = 0; i < n; ++i) {
    const float g = grads[i] + wd * params[i];
    const float v = mu * momentum[i] + g;
    momentum[i] = v;
    params[i] -= lr * v;
  }
}

void add(float* __restrict__ sum, const float* __restrict__ part, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) sum[i] += part[i];
}

// Sums of gradient buffers go through chunks that stay in L1, so each gradient is read once.
constexpr std::size_t chunk = 2048;

}  // namespace

void sgd_step_loop(float* params, const float* grads, float* momentum, std::size_t n, float lr,
                   float mu, float wd) {
  step(params, grads, momentum, n, lr, mu, wd);
}

void sum_sgd_step_loop(float* params, const float* const* parts, int count, float* momentum,
                       std::size_t n, float lr, float mu, float wd) {
  alignas(64) float sum[chunk];
  for (std::size_t at = 0; at < n; at += chunk) {
    const std::size_t len = std::min(chunk, n - at);
    if (count == 1) {
      step(params + at, parts[0] + at, momentum + at, len, lr, mu, wd);
      continue;
    }
    const float* __restrict__ first = parts[0] + at;
    const float* __restrict__ second = parts[1] + at;
    for (std::size_t i = 0; i < len; ++i) sum[i] = first[i] + second[i];
    for (int c = 2; c < count; ++c) add(sum, parts[c] + at, len);
    step(params + at, sum, momentum + at, len, lr, mu, wd);
  }
}

void sum_sgd_step_and_clear_loop(float* params, float* const* parts, int count, float* momentum,
                                 std::size_t n, float lr, float mu, float wd) {
  for (std::size_t at = 0; at < n; at += chunk) {
    const std::size_t len = std::min(chunk, n - at);
    float* sum = parts[0] + at;
    for (int c = 1; c < count; ++c) {
      float* part = parts[c] + at;
      add(sum, part, len);
      std::fill_n(part, len, 0.0f);
    }
    step(params + at, sum, momentum + at, len, lr, mu, wd);
    std::fill_n(sum, len, 0.0f);
  }
}

}  // namespace cnnbench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "layers/kernel_dispatch.h"

namespace cnnbench {

namespace {
HWY_EXPORT(sgd_step_loop);
HWY_EXPORT(sum_sgd_step_loop);
HWY_EXPORT(sum_sgd_step_and_clear_loop);
}  // namespace

void sgd_step(float* params, const float* grads, float* momentum, std::size_t n,
              const SgdConfig& config) {
  CNNBENCH_DISPATCH(sgd, sgd_step_loop)(params, grads, momentum, n, config.lr, config.momentum,
                                      config.weight_decay);
}

void sum_sgd_step(float* params, const float* const* parts, int count, float* momentum,
                  std::size_t n, const SgdConfig& config) {
  CNNBENCH_CHECK(count >= 1, "sum_sgd_step needs at least one gradient buffer");
  CNNBENCH_DISPATCH(sgd, sum_sgd_step_loop)(params, parts, count, momentum, n, config.lr,
                                          config.momentum, config.weight_decay);
}

void sum_sgd_step_and_clear(float* params, float* const* parts, int count, float* momentum,
                            std::size_t n, const SgdConfig& config) {
  CNNBENCH_CHECK(count >= 1, "sum_sgd_step_and_clear needs at least one gradient buffer");
  CNNBENCH_DISPATCH(sgd, sum_sgd_step_and_clear_loop)(params, parts, count, momentum, n, config.lr,
                                                    config.momentum, config.weight_decay);
}

}  // namespace cnnbench
#endif  // HWY_ONCE
