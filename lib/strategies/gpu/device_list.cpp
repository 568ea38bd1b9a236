// Lists the CUDA devices and versions; an absent driver or device gives an empty list and a
// reason instead of an error, so `cnnbench info` works on any machine.
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "cnnbench/gpu.hpp"

namespace cnnbench {

namespace {
// CUDA encodes versions as 1000 * major + 10 * minor.
std::string cuda_version_string(int version) {
  if (version <= 0) return "";
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

std::string no_device_reason(cudaError_t status) {
  if (status == cudaSuccess) return "no CUDA device found";
  return std::string("no CUDA device: cudaGetDeviceCount failed: ") + cudaGetErrorName(status) +
         ": " + cudaGetErrorString(status);
}
}  // namespace

std::vector<GpuDevice> list_gpu_devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error so later calls start clean
    return {};
  }
  std::vector<GpuDevice> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    GpuDevice d;
    d.index = i;
    d.name = prop.name;
    d.compute_major = prop.major;
    d.compute_minor = prop.minor;
    d.memory_bytes = prop.totalGlobalMem;
    d.multiprocessors = prop.multiProcessorCount;
    char bus_id[32] = {};
    if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, i) == cudaSuccess) d.pci_bus_id = bus_id;
    devices.push_back(d);
  }
  return devices;
}

GpuRuntime gpu_runtime() {
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
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    out.unavailable_reason = no_device_reason(status);
  }
  return out;
}

}  // namespace cnnbench
