// Whether this process can run the GPU strategy: the GPU tests skip with this reason when not.
#pragma once

#include <string>

#include "cnnbench/config.hpp"
#include "cnnbench/gpu.hpp"

namespace cnnbench::test {

// Why GPU runs cannot happen here, or empty when a device is usable.
inline std::string no_device_reason() {
#if !CNNBENCH_HAVE_CUDA
  return "built without CUDA";
#else
  if (!list_gpu_devices().empty()) return "";
  return gpu_runtime().unavailable_reason;
#endif
}

}  // namespace cnnbench::test
