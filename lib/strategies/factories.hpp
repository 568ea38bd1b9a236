// Constructors of the built-in strategies, one per folder; registry.cpp lists them.
#pragma once

#include <memory>

#include "cnnbench/train.hpp"

namespace cnnbench {

std::unique_ptr<Strategy> make_serial_strategy();
std::unique_ptr<Strategy> make_blas_strategy();
std::unique_ptr<Strategy> make_stream_strategy();
std::unique_ptr<Strategy> make_cluster_strategy();  // only with CNNBENCH_HAVE_MPI
// Only with CNNBENCH_HAVE_CUDA: loads the GPU module (gpu/module_loader.cpp) and asks it.
std::unique_ptr<Strategy> make_gpu_strategy();

}  // namespace cnnbench
