// How the GPU strategy puts its starting state on the device, written once for any runtime Api:
// the CUDA one in gpu_strategy.cpp and a fake with deferred streams in tests/test_gpu_runtime.cpp.
#pragma once

#include <cstddef>
#include <span>

namespace cnnbench::gpu {

// One upload: `bytes` from host memory to device memory, or zeros when host is nullptr.
struct Upload {
  void* device = nullptr;
  const void* host = nullptr;
  std::size_t bytes = 0;
};

// Enqueues every upload on `stream` and then waits for the whole device. The strategy's streams
// are non-blocking: they are not ordered after the legacy stream, on which the synchronous
// cudaMemcpy and cudaMemset run, and cudaMemset (and a pageable cudaMemcpy) may return before the
// device has the data. Uploading on the stream and synchronising the device means that work on
// any stream, later, sees all of it. Api provides
//   copy_async(void* device, const void* host, std::size_t bytes, Stream stream)
//   zero_async(void* device, std::size_t bytes, Stream stream)
//   synchronize_device()
template <class Api, class Stream>
void upload_and_settle(Api& api, Stream stream, std::span<const Upload> uploads) {
  for (const Upload& u : uploads) {
    if (u.bytes == 0) continue;
    if (u.host) {
      api.copy_async(u.device, u.host, u.bytes, stream);
    } else {
      api.zero_async(u.device, u.bytes, stream);
    }
  }
  api.synchronize_device();
}

}  // namespace cnnbench::gpu
