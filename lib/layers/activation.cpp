// Element-wise activations. Backward takes the forward *output*, so every function may run in
// place (out == inp, dinp == dout) and no input copy has to be kept.
#include <cmath>

#include "cnnbench/layers.hpp"

namespace cnnbench {

void relu_forward(float* out, const float* inp, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

// d relu = 1 where the output is positive.
void relu_backward(float* dinp, const float* dout, const float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
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
