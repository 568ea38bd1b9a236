// Pixels to floats as torchvision's ToTensor makes them: byte / 255, by division (a multiplication
// by 1/255 differs in the last bit for some bytes). Compiled once per SIMD target, a plain loop the
// compiler vectorises for it: the portable build divides 4 floats an instruction, AVX-512 16.
// Division is correctly rounded on every target, so every target gives the same floats. It runs
// on the element-wise family's target (KernelFamily::activation).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "data/pixels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#ifndef CNNBENCH_DATA_PIXELS_ONCE
#define CNNBENCH_DATA_PIXELS_ONCE
#include <cstddef>
#include <cstdint>

#include "cnnbench/data.hpp"
#endif

HWY_BEFORE_NAMESPACE();
namespace cnnbench::HWY_NAMESPACE {

void unit_floats_loop(float* __restrict__ out, const std::uint8_t* __restrict__ bytes,
                      std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(bytes[i]) / 255.0f;
}

}  // namespace cnnbench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "layers/kernel_dispatch.h"

namespace cnnbench {

namespace {
HWY_EXPORT(unit_floats_loop);
}  // namespace

void pixels_to_unit_floats(float* out, const std::uint8_t* bytes, std::size_t n) {
  CNNBENCH_DISPATCH(activation, unit_floats_loop)(out, bytes, n);
}

}  // namespace cnnbench
#endif  // HWY_ONCE
