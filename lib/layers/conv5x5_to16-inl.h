// What the two files of LeNet-5's c2 convolution share (conv5x5_to16.cpp, the forward pass, and
// conv5x5_to16_backward.cpp): the shape check, the weights repacked channels last, and on each
// Highway target how many vectors hold the 16 output channels.
// Included once per target from inside those two files only.
#include "layers/conv5x5-inl.h"

#ifndef CNNBENCH_LAYERS_CONV5X5_TO16_INL_ONCE
#define CNNBENCH_LAYERS_CONV5X5_TO16_INL_ONCE
#include <string>

#include "cnnbench/core.hpp"

namespace cnnbench::conv5x5 {

inline void check_sixteen_shape(int C, int H, int W) {
  CNNBENCH_CHECK(C > 0 && H >= 5 && W >= 5,
                 "conv5x5_to16: needs an image of at least 5x5 and one channel (got " +
                     std::to_string(C) + "x" + std::to_string(H) + "x" + std::to_string(W) + ")");
}

// weight (16,C,5,5) -> packed (C,5,5,16): the 16 output channels of one tap are contiguous.
inline void pack_channels_last(float* packed, const float* weight, int C) {
  for (int k = 0; k < channels; ++k) {
    for (int c = 0; c < C; ++c) {
      for (int t = 0; t < taps; ++t) {
        packed[(c * taps + t) * channels + k] = weight[(k * C + c) * taps + t];
      }
    }
  }
}

}  // namespace cnnbench::conv5x5
#endif  // CNNBENCH_LAYERS_CONV5X5_TO16_INL_ONCE

#if defined(CNNBENCH_LAYERS_CONV5X5_TO16_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CNNBENCH_LAYERS_CONV5X5_TO16_INL_H_
#undef CNNBENCH_LAYERS_CONV5X5_TO16_INL_H_
#else
#define CNNBENCH_LAYERS_CONV5X5_TO16_INL_H_
#endif

#include <hwy/highway.h>

#include "layers/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace cnnbench::HWY_NAMESPACE {
namespace {

using conv5x5::channels;

// The 16 output channels as 16/lanes vectors.
constexpr int channel_vectors = channels / lanes;  // 1 (AVX-512), 2 (AVX2), 4 (SSE4, NEON)

}  // namespace
}  // namespace cnnbench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // CNNBENCH_LAYERS_CONV5X5_TO16_INL_H_
