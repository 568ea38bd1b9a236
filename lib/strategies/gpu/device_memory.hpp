// Owning handles for CUDA resources (device and pinned memory, streams, events, cuBLAS, graphs):
// created through checked calls, released in destructors that never throw.
#pragma once

#include <cstddef>
#include <utility>

#include "cuda_check.hpp"

namespace cnnbench::gpu {

// count elements of T from Allocate, given back with Free; move-only.
template <class T, cudaError_t (*Allocate)(void**, std::size_t), cudaError_t (*Free)(void*)>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  explicit CudaBuffer(std::size_t count) : count_(count) {
    if (count > 0) CNNBENCH_CUDA(Allocate(reinterpret_cast<void**>(&data_), count * sizeof(T)));
  }
  ~CudaBuffer() {
    if (data_) (void)Free(data_);
  }
  CudaBuffer(CudaBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  CudaBuffer& operator=(CudaBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    return *this;
  }
  T* data() const { return data_; }
  std::size_t size() const { return count_; }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

// Device memory for count elements of T.
template <class T>
using DeviceBuffer = CudaBuffer<T, cudaMalloc, cudaFree>;
// Page-locked host memory, so that cudaMemcpyAsync really is asynchronous.
template <class T>
using PinnedBuffer = CudaBuffer<T, cudaMallocHost, cudaFreeHost>;

// A handle type H released by Release; move-only.
template <class H, cudaError_t (*Release)(H)>
class CudaHandle {
 public:
  CudaHandle() = default;
  explicit CudaHandle(H handle) : handle_(handle) {}
  ~CudaHandle() {
    if (handle_) (void)Release(handle_);
  }
  CudaHandle(CudaHandle&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  CudaHandle& operator=(CudaHandle&& other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  H get() const { return handle_; }
  explicit operator bool() const { return handle_ != nullptr; }

 private:
  H handle_ = nullptr;
};

using Stream = CudaHandle<cudaStream_t, cudaStreamDestroy>;
using Event = CudaHandle<cudaEvent_t, cudaEventDestroy>;
using GraphExec = CudaHandle<cudaGraphExec_t, cudaGraphExecDestroy>;

inline Stream make_stream() {
  cudaStream_t s = nullptr;
  CNNBENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}

inline Event make_event() {
  cudaEvent_t e = nullptr;
  CNNBENCH_CUDA(cudaEventCreate(&e));
  return Event(e);
}

// Seconds between two recorded, completed events.
inline double elapsed_seconds(const Event& start, const Event& end) {
  float ms = 0.0f;
  CNNBENCH_CUDA(cudaEventElapsedTime(&ms, start.get(), end.get()));
  return ms * 1e-3;
}

class CublasHandle {
 public:
  CublasHandle() { CNNBENCH_CUBLAS(cublasCreate(&handle_)); }
  ~CublasHandle() {
    if (handle_) (void)cublasDestroy(handle_);
  }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

}  // namespace cnnbench::gpu
