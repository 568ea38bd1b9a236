// Element-wise activations. Backward takes the forward *output*, so every function may run in
// place (out == inp, dinp == dout) and no input copy has to be kept. ReLU, which every model runs,
// is compiled once per SIMD target (plain loops the compiler vectorises for it); tanh and sigmoid
// call the C library's tanh/exp and stay one portable build.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "layers/activation.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#ifndef CNNBENCH_LAYERS_ACTIVATION_ONCE
#define CNNBENCH_LAYERS_ACTIVATION_ONCE
#include <cmath>
#include <cstddef>

#include "cnnbench/layers.hpp"
#endif

HWY_BEFORE_NAMESPACE();
namespace cnnbench::HWY_NAMESPACE {

// In place is allowed, so no __restrict__: the loop reads and writes one element per index.
void relu_forward_loop(float* out, const float* inp, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

// d relu = 1 where the output is positive. dout[i] is read whatever the test says: read only
// where it is taken, the load is conditional, which targets without masked loads (SSE4, scalar)
// cannot vectorise, and their branch mispredicted on half of the elements (0.3 GFLOP/s on SSE4).
void relu_backward_loop(float* dinp, const float* dout, const float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float gradient = dout[i];
    dinp[i] = out[i] > 0.0f ? gradient : 0.0f;
  }
}

}  // namespace cnnbench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "layers/kernel_dispatch.h"

namespace cnnbench {

namespace {
HWY_EXPORT(relu_forward_loop);
HWY_EXPORT(relu_backward_loop);
}  // namespace

void relu_forward(float* out, const float* inp, std::size_t n) {
  CNNBENCH_DISPATCH(activation, relu_forward_loop)(out, inp, n);
}

void relu_backward(float* dinp, const float* dout, const float* out, std::size_t n) {
  CNNBENCH_DISPATCH(activation, relu_backward_loop)(dinp, dout, out, n);
}

void tanh_forward(float* out, const float* inp, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = std::tanh(inp[i]);
}

// d tanh = 1 - tanh^2.
void tanh_backward(float* dinp, const float* dout, const float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dinp[i] = dout[i] * (1.0f - out[i] * out[i]);
}

// 1 / (1 + e^-x): for very negative x, e^-x overflows to inf and the result is the correct 0.
void sigmoid_forward(float* out, const float* inp, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = 1.0f / (1.0f + std::exp(-inp[i]));
}

// d sigmoid = s (1 - s).
void sigmoid_backward(float* dinp, const float* dout, const float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dinp[i] = dout[i] * out[i] * (1.0f - out[i]);
}

}  // namespace cnnbench
#endif  // HWY_ONCE
