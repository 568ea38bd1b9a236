// Lists the CUDA devices and versions; an absent driver or device gives an empty list and a
// reason instead of an error, so that `cnnbench info` works on any machine.
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "cnnbench/core.hpp"
#include "cuda_check.hpp"
#include "device_count.hpp"
#include "module.hpp"

namespace cnnbench::gpu {

namespace {
// CUDA encodes versions as 1000 * major + 10 * minor.
std::string cuda_version_string(int version) {
  if (version <= 0) return "";
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}
}  // namespace

DeviceCount count_devices() {
  DeviceCount out;
  const cudaError_t status = cudaGetDeviceCount(&out.count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    out.count = 0;
    out.runtime_failed = true;
    out.reason = std::string("no CUDA device: cudaGetDeviceCount failed: ") +
                 cudaGetErrorName(status) + ": " + cudaGetErrorString(status);
  } else if (out.count == 0) {
    out.reason = "no CUDA device found";
  }
  return out;
}

GpuDevice describe_device(int index) {
  cudaDeviceProp prop{};
  CNNBENCH_CUDA(cudaGetDeviceProperties(&prop, index));
  GpuDevice d;
  d.index = index;
  d.name = prop.name;
  d.compute_major = prop.major;
  d.compute_minor = prop.minor;
  d.memory_bytes = prop.totalGlobalMem;
  d.multiprocessors = prop.multiProcessorCount;
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, index) == cudaSuccess) d.pci_bus_id = bus_id;
  return d;
}

std::vector<GpuDevice> list_devices() {
  const int count = count_devices().count;
  std::vector<GpuDevice> devices;
  for (int i = 0; i < count; ++i) {
    try {
      devices.push_back(describe_device(i));
    } catch (const Error&) {
      (void)cudaGetLastError();  // a device the runtime cannot describe is left out
    }
  }
  return devices;
}

GpuRuntime describe_runtime() {
  GpuRuntime out;
  int runtime = 0, driver = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) {
    out.runtime_version = cuda_version_string(runtime);
  }
  if (cudaDriverGetVersion(&driver) == cudaSuccess) out.driver_version = cuda_version_string(driver);
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS) {
    out.cublas_version =
        std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  }
  out.unavailable_reason = count_devices().reason;
  return out;
}

}  // namespace cnnbench::gpu
