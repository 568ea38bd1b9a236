// The layer shapes of FC-3 and LeNet-5 that the per-layer micro-benchmarks run, with the flops
// each pass counts, apart from Google Benchmark so that a test can check the counts.
#pragma once

#include <cstddef>

#include "cnnbench/layers.hpp"
#include "cnnbench/models.hpp"

namespace cnnbench::micro {

// Products count 2 flops per multiply-add, as the models' train_flops_per_image does (padding
// taps included); the bias gradient one per output; pooling 3 comparisons per 2x2 window; ReLU one
// per element; SGD 6 per parameter (g += wd p; v = mu v + g; p -= lr v).

struct DenseLayer {
  const char* name;
  int in, out;
  bool needs_dinp;  // false for a model's first layer
  double forward_flops(int B) const { return 2.0 * B * in * out; }
  double bias_gradient_flops(int B) const { return double(B) * out; }
  double backward_flops(int B) const {
    return (needs_dinp ? 2 : 1) * forward_flops(B) + bias_gradient_flops(B);
  }
};

struct ConvLayer {
  const char* name;
  int in_channels, size, out_channels, kernel, pad;
  bool needs_dinp;
  Conv2dShape shape(int batch) const {
    return {batch, in_channels, size, size, out_channels, kernel, pad};
  }
};

// Floats of a convolution's input (B,C,H,W), weight (K,C,R,R) and output (B,K,Ho,Wo).
inline std::size_t input_floats(const Conv2dShape& s) {
  return std::size_t(s.batch) * s.in_channels * s.height * s.width;
}
inline std::size_t weight_floats(const Conv2dShape& s) {
  return std::size_t(s.out_channels) * s.in_channels * s.kernel * s.kernel;
}
inline std::size_t output_floats(const Conv2dShape& s) {
  return std::size_t(s.batch) * s.out_channels * s.out_height() * s.out_width();
}

inline double conv_product_flops(const Conv2dShape& s) {
  return 2.0 * s.batch * s.out_channels * s.in_channels * s.kernel * s.kernel * s.out_height() *
         s.out_width();
}

inline double conv_bias_gradient_flops(const ConvLayer& layer, int B) {
  const Conv2dShape s = layer.shape(B);
  return double(B) * s.out_channels * s.out_height() * s.out_width();
}

// Weight and bias gradients, plus the input gradient where the layer needs one.
inline double conv_backward_flops(const ConvLayer& layer, int B) {
  return (layer.needs_dinp ? 2 : 1) * conv_product_flops(layer.shape(B)) +
         conv_bias_gradient_flops(layer, B);
}

// The weight and bias gradients alone.
inline double conv_backward_weights_flops(const ConvLayer& layer, int B) {
  return conv_product_flops(layer.shape(B)) + conv_bias_gradient_flops(layer, B);
}

struct PoolLayer {
  const char* name;
  int channels, size;
  double flops(int B) const { return 3.0 * B * channels * (size / 2) * (size / 2); }
};

inline double sgd_flops(std::size_t params) { return 6.0 * double(params); }

// The shapes of models.hpp's Fc3Sizes and Lenet5Sizes.
inline constexpr DenseLayer kFc3Dense[] = {{"fc3.f1", Fc3Sizes::input, Fc3Sizes::hidden1, false},
                                           {"fc3.f2", Fc3Sizes::hidden1, Fc3Sizes::hidden2, true},
                                           {"fc3.f3", Fc3Sizes::hidden2, Fc3Sizes::classes, true}};
inline constexpr ConvLayer kLenet5Conv[] = {
    {"lenet5.c1", 1, Lenet5Sizes::side, Lenet5Sizes::c1_channels, Lenet5Sizes::kernel,
     Lenet5Sizes::c1_pad, false},
    {"lenet5.c2", Lenet5Sizes::c1_channels, Lenet5Sizes::p1_side, Lenet5Sizes::c2_channels,
     Lenet5Sizes::kernel, 0, true}};
inline constexpr PoolLayer kLenet5Pool[] = {
    {"lenet5.pool1", Lenet5Sizes::c1_channels, Lenet5Sizes::side},
    {"lenet5.pool2", Lenet5Sizes::c2_channels, Lenet5Sizes::a2_side}};
inline constexpr DenseLayer kLenet5Dense[] = {
    {"lenet5.f1", Lenet5Sizes::flat, Lenet5Sizes::hidden1, true},
    {"lenet5.f2", Lenet5Sizes::hidden1, Lenet5Sizes::hidden2, true},
    {"lenet5.f3", Lenet5Sizes::hidden2, Lenet5Sizes::classes, true}};

}  // namespace cnnbench::micro
