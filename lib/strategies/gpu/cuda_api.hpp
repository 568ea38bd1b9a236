// The CUDA runtime behind upload_and_settle (device_upload.hpp) and GraphRunner
// (graph_runner.hpp), whose fakes live in tests/test_gpu_runtime.cpp; captures and launches on
// `stream`.
#pragma once

#include <cstddef>
#include <string>

#include "cuda_check.hpp"
#include "device_memory.hpp"

namespace cnnbench::gpu {

struct CudaApi {
  using Graph = cudaGraph_t;
  using Exec = GraphExec;
  cudaStream_t stream = nullptr;

  static std::string message(cudaError_t status) {
    if (status == cudaSuccess) return "";
    return std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
  }
  void copy_async(void* device, const void* host, std::size_t bytes, cudaStream_t on) {
    CNNBENCH_CUDA(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, on));
  }
  void zero_async(void* device, std::size_t bytes, cudaStream_t on) {
    CNNBENCH_CUDA(cudaMemsetAsync(device, 0, bytes, on));
  }
  void synchronize_device() { CNNBENCH_CUDA(cudaDeviceSynchronize()); }
  std::string begin_capture() {
    return message(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  }
  std::string end_capture(cudaGraph_t& graph) {
    return message(cudaStreamEndCapture(stream, &graph));
  }
  std::string instantiate(GraphExec& exec, cudaGraph_t graph) {
    cudaGraphExec_t made = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&made, graph, 0);
    if (status == cudaSuccess) exec = GraphExec(made);
    return message(status);
  }
  void launch(const GraphExec& exec) { CNNBENCH_CUDA(cudaGraphLaunch(exec.get(), stream)); }
  void destroy_graph(cudaGraph_t graph) { (void)cudaGraphDestroy(graph); }
  void clear_error() { (void)cudaGetLastError(); }
};

}  // namespace cnnbench::gpu
