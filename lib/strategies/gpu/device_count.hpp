// How many CUDA devices this process sees and, when none, why: the one wording of "no CUDA
// device", for `cnnbench info` and for the GPU strategy's error; and what each device is.
#pragma once

#include <string>

#include "cnnbench/gpu.hpp"

namespace cnnbench::gpu {

struct DeviceCount {
  int count = 0;
  bool runtime_failed = false;  // cudaGetDeviceCount failed: no driver, a driver too old, ...
  std::string reason;           // why there is none; empty when count > 0
};

// Leaves no CUDA error behind, so that later calls start clean.
DeviceCount count_devices();

// Name, compute capability, memory, SMs and PCI bus id; throws cnnbench::Error naming the failed
// call when the runtime cannot describe the device.
GpuDevice describe_device(int index);

}  // namespace cnnbench::gpu
