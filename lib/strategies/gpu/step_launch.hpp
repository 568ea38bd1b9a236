// The host-callable entry points of the CUDA kernels: enqueue one training step (or its parts) on
// a stream. Everything is asynchronous and capturable into a CUDA graph (no host sync, no alloc).
#pragma once

#include <cstddef>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "training_step.hpp"

namespace cnnbench::gpu {

// Device pointers and constants of one step; the parameter views point into params/grads.
struct StepLaunch {
  bool lenet5 = true;
  BatchSource source;
  StepBuffers buffers;
  float* params = nullptr;
  float* grads = nullptr;
  float* momentum = nullptr;
  std::size_t param_count = 0;
  Fc3Tensors fc3_params{}, fc3_grads{};
  Lenet5Tensors lenet5_params{}, lenet5_grads{};
  float grad_scale = 1.0f;  // 1 / global batch
  float lr = 0.01f, momentum_factor = 0.9f, weight_decay = 0.0f;
};

// gather + forward + backward (gradients overwritten) + the step's loss sum.
void enqueue_forward_backward(const StepLaunch& step, cudaStream_t stream, cublasHandle_t blas);
// SGD update of the parameters, then the step counter advances.
void enqueue_update(const StepLaunch& step, cudaStream_t stream);

}  // namespace cnnbench::gpu
