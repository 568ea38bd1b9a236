// The host-callable entry points of the CUDA kernels: enqueue one training step (or its parts) on
// a stream. Everything is asynchronous and capturable into a CUDA graph (no host sync, no alloc).
#pragma once

#include <cstddef>
#include <cstdint>

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
  // The range's device timer stamps (device_timing.hpp): (steps, stamps_per_step), the row of
  // buffers.step; slot 0 is the step's start, slot k the end of its k-th kernel group.
  std::uint64_t* stamps = nullptr;
  int stamps_per_step = 0;
};

// gather + forward + backward (gradients overwritten) + the step's loss sum; stamps slots 0 (the
// step's start) to the number of its kernel groups.
void enqueue_forward_backward(const StepLaunch& step, cudaStream_t stream, cublasHandle_t blas);
// SGD update of the parameters, its group's end stamped into `slot`, then the step counter
// advances.
void enqueue_update(const StepLaunch& step, cudaStream_t stream, int slot);
// The device timer into the current step's `slot`, after the work enqueued before it.
void enqueue_stamp(const StepLaunch& step, cudaStream_t stream, int slot);

}  // namespace cnnbench::gpu
