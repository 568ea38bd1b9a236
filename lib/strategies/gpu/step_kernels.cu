// The CUDA executor of training_step.hpp: each for_each becomes one grid-stride kernel that calls
// a per-element body, each GEMM one cuBLAS call (FP32, no TF32), all on the caller's stream.
#include <algorithm>
#include <cstdint>

#include "cuda_check.hpp"
#include "step_launch.hpp"

namespace cnnbench::gpu {

template <class Body>
__global__ void for_each_kernel(std::int64_t n, Body body) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    body(i);
  }
}

// The device's global nanosecond timer into stamps[*step * per_step + slot]. A kernel, not a CUDA
// event: a captured graph would record every step into the same events, while the device's step
// counter gives each step its own row with no host call per step.
__global__ void stamp_kernel(std::uint64_t* stamps, const int* step, int per_step, int slot) {
  std::uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  stamps[static_cast<std::int64_t>(*step) * per_step + slot] = now;
}

void launch_stamp(std::uint64_t* stamps, const int* step, int per_step, int slot,
                  cudaStream_t stream) {
  stamp_kernel<<<1, 1, 0, stream>>>(stamps, step, per_step, slot);
  check_launch("stamp", __FILE__, __LINE__);
}

struct CudaExecutor {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  const StepLaunch* step = nullptr;
  int next_slot = 0;  // of step->stamps: where the next group's end goes

  void end_group(KernelGroup /*group*/) {
    launch_stamp(step->stamps, step->buffers.step, step->stamps_per_step, next_slot++, stream);
  }

  template <class Body>
  void for_each(const char* name, std::int64_t n, Body body) {
    if (n <= 0) return;
    constexpr int threads = 256;
    // Enough blocks to fill any current GPU several times; larger n loops inside the kernel.
    constexpr std::int64_t max_blocks = 1 << 16;
    const auto blocks = static_cast<unsigned>(std::min((n + threads - 1) / threads, max_blocks));
    for_each_kernel<<<blocks, threads, 0, stream>>>(n, body);
    check_launch(name, __FILE__, __LINE__);
  }

  void gemm(const char* name, const GemmCall& g) {
    const cublasStatus_t status =
        cublasSgemm(blas, g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                    g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.m, g.n, g.k, &g.alpha, g.a, g.lda,
                    g.b, g.ldb, &g.beta, g.c, g.ldc);
    check_cublas(status, name, __FILE__, __LINE__);
  }
};

void enqueue_forward_backward(const StepLaunch& step, cudaStream_t stream, cublasHandle_t blas) {
  enqueue_stamp(step, stream, 0);
  CudaExecutor exec{stream, blas, &step, 1};
  gather_batch_step(exec, step.source, step.buffers);
  if (step.lenet5) {
    lenet5_forward_backward(exec, step.lenet5_params, step.lenet5_grads, step.buffers,
                            step.grad_scale);
  } else {
    fc3_forward_backward(exec, step.fc3_params, step.fc3_grads, step.buffers, step.grad_scale);
  }
}

void enqueue_update(const StepLaunch& step, cudaStream_t stream, int slot) {
  CudaExecutor exec{stream, nullptr, &step, slot};
  sgd_update_step(exec, step.params, step.grads, step.momentum, step.param_count, step.lr,
                  step.momentum_factor, step.weight_decay);
  advance_step(exec, step.buffers.step);  // after the update's stamp, which reads the counter
}

void enqueue_stamp(const StepLaunch& step, cudaStream_t stream, int slot) {
  launch_stamp(step.stamps, step.buffers.step, step.stamps_per_step, slot, stream);
}

}  // namespace cnnbench::gpu
