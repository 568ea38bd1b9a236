// Checked CUDA and cuBLAS calls: any failure throws cnnbench::Error naming the call, the error
// and where it was made, e.g. "cudaMalloc(&p, bytes) failed: out of memory (...)".
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace cnnbench::gpu {

void check_cuda(cudaError_t status, const char* call, const char* file, int line);
void check_cublas(cublasStatus_t status, const char* call, const char* file, int line);
// After a kernel launch: launch errors (bad configuration, no kernel image for this GPU, ...).
void check_launch(const char* kernel, const char* file, int line);

}  // namespace cnnbench::gpu

#define CNNBENCH_CUDA(call) ::cnnbench::gpu::check_cuda((call), #call, __FILE__, __LINE__)
#define CNNBENCH_CUBLAS(call) ::cnnbench::gpu::check_cublas((call), #call, __FILE__, __LINE__)
