// CUDA devices visible to this process, for `cnnbench info` and run reports. Without CUDA in the
// build, without the GPU module (libcnnbench-gpu.so, loaded on the first call), or without a
// driver or device at run time, the list is empty and the reason says why.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cnnbench/config.hpp"

namespace cnnbench {

struct GpuDevice {
  int index = 0;
  std::string name;                 // "NVIDIA H200"
  int compute_major = 0, compute_minor = 0;
  std::uint64_t memory_bytes = 0;
  int multiprocessors = 0;
  std::string pci_bus_id;           // "0000:19:00.0"
};

struct GpuRuntime {
  std::string runtime_version;      // CUDA runtime linked, "13.0"; empty without CUDA
  std::string driver_version;       // highest CUDA version the driver supports; empty if none
  std::string cublas_version;       // e.g. "13.0.0"; empty without CUDA
  std::string unavailable_reason;   // why no device is listed; empty when some are
  std::string module_path;          // where libcnnbench-gpu.so was loaded from; empty if not
};

// The CUDA toolkit version the GPU module was built with ("13.0"), "" in builds without CUDA; a
// CPU run names it without loading CUDA (a GPU run's metrics carry the runtime's own version).
#if CNNBENCH_HAVE_CUDA
std::string cuda_version_string();
std::vector<GpuDevice> list_gpu_devices();
GpuRuntime gpu_runtime();
#else
inline std::string cuda_version_string() { return ""; }
inline std::vector<GpuDevice> list_gpu_devices() { return {}; }
inline GpuRuntime gpu_runtime() {
  GpuRuntime out;
  out.unavailable_reason = "built without CUDA (no CUDA toolkit found or CNNBENCH_WITH_CUDA=OFF)";
  return out;
}
#endif

// {"runtime": ..., "driver": ..., "cublas": ..., "devices": [...], "reason": ..., "module": ...}
inline nlohmann::json gpu_info_json() {
  const GpuRuntime runtime = gpu_runtime();
  nlohmann::json devices = nlohmann::json::array();
  for (const GpuDevice& d : list_gpu_devices()) {
    devices.push_back({{"index", d.index},
                       {"name", d.name},
                       {"compute_capability", std::to_string(d.compute_major) + "." +
                                                  std::to_string(d.compute_minor)},
                       {"memory_bytes", d.memory_bytes},
                       {"multiprocessors", d.multiprocessors},
                       {"pci_bus_id", d.pci_bus_id}});
  }
  nlohmann::json out = {{"runtime", runtime.runtime_version},
                        {"driver", runtime.driver_version},
                        {"cublas", runtime.cublas_version},
                        {"devices", devices}};
  if (!runtime.module_path.empty()) out["module"] = runtime.module_path;
  if (!runtime.unavailable_reason.empty()) out["reason"] = runtime.unavailable_reason;
  return out;
}

}  // namespace cnnbench
