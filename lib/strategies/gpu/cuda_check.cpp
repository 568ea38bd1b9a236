// Turns CUDA and cuBLAS status codes into cnnbench::Error messages that name the failed call.
#include "cuda_check.hpp"

#include <string>

#include "cnnbench/core.hpp"

namespace cnnbench::gpu {

namespace {
std::string where(const char* file, int line) {
  std::string path = file;
  const auto slash = path.find_last_of('/');
  return " (" + (slash == std::string::npos ? path : path.substr(slash + 1)) + ":" +
         std::to_string(line) + ")";
}
}  // namespace

void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  fail(std::string(call) + " failed: " + cudaGetErrorName(status) + ": " +
       cudaGetErrorString(status) + where(file, line));
}

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail(std::string(call) + " failed: " + cublasGetStatusName(status) + ": " +
       cublasGetStatusString(status) + where(file, line));
}

void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) return;
  fail(std::string("launch of kernel ") + kernel + " failed: " + cudaGetErrorName(status) + ": " +
       cudaGetErrorString(status) + where(file, line));
}

}  // namespace cnnbench::gpu
