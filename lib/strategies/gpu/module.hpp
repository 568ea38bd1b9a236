// The boundary between libcnnbench and libcnnbench-gpu.so, the module that holds everything that
// needs the CUDA runtime and cuBLAS. libcnnbench loads the module with dlopen only when a run
// asks for the GPU (module_loader.cpp), so that a CPU run maps none of CUDA; the module's one
// exported symbol, cnnbench_gpu_module(), returns the table below.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cnnbench/gpu.hpp"
#include "cnnbench/train.hpp"

namespace cnnbench::gpu {

// Raised whenever ModuleTable changes, so that a module from another build is refused.
inline constexpr std::uint32_t module_abi_version = 1;

// abi_version and library_version stay the first members, so that any module's can be read.
struct ModuleTable {
  std::uint32_t abi_version = 0;          // module_abi_version of the module's build
  const char* library_version = nullptr;  // CNNBENCH_VERSION of the module's build
  // The strategy; throws cnnbench::Error when this process has no usable device.
  std::unique_ptr<Strategy> (*make_strategy)() = nullptr;
  // Never throw: no driver or no device gives an empty list and the reason in GpuRuntime.
  std::vector<GpuDevice> (*list_devices)() = nullptr;
  GpuRuntime (*runtime)() = nullptr;
};

// The module's side of the table (device_list.cpp, gpu_strategy.cpp); named apart from the public
// functions of gpu.hpp, which libcnnbench defines by forwarding to them.
std::unique_ptr<Strategy> make_gpu_strategy_on_device();
std::vector<GpuDevice> list_devices();
GpuRuntime describe_runtime();

}  // namespace cnnbench::gpu

// The entry point that libcnnbench looks up with dlsym.
extern "C" const cnnbench::gpu::ModuleTable* cnnbench_gpu_module();
