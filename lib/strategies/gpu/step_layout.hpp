// Where a step's tensors live on the device: the model's named tensors inside its flat buffers,
// and the activation buffers (StepBuffers) cut from one allocation into 256-byte aligned arrays
// (size it with step_memory_bytes, allocate, then carve_step_buffers).
#pragma once

#include <cstddef>

#include "cnnbench/models.hpp"
#include "cnnbench/train.hpp"
#include "step_launch.hpp"

namespace cnnbench::gpu {

// The flat device buffers (each of model.params.size() floats), their named tensors in
// state_dict order, and the run's SGD constants.
void set_model_tensors(StepLaunch& step, const Model& model, const TrainConfig& config,
                       float* params, float* grads, float* momentum);

// Bytes of the allocation for a batch of `batch` samples.
std::size_t step_memory_bytes(bool lenet5, int batch);
// The buffers inside the allocation at `base`.
StepBuffers carve_step_buffers(char* base, bool lenet5, int batch);

}  // namespace cnnbench::gpu
