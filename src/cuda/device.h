// The CUDA device as the rest of epserve sees it: which GPU, how much memory, and device memory
// owned by RAII buffers. Every CUDA runtime error becomes a Status here, at the seam, naming the
// GPU and what was being done ("cuda:0 (NVIDIA H200): allocating the KV cache (12.0 GB):
// out of memory, 3.1 GB free"); nothing in src/cuda aborts on a failed call.
// Thread safety: DeviceBuffer is not shared between threads; Probe may be called from any thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "base/status.h"

namespace epserve::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;  // "NVIDIA H200"
  int sm_major = 0, sm_minor = 0;
  int num_sms = 0;
  int64_t total_bytes = 0, free_bytes = 0;
  // "cuda:0 (NVIDIA H200, sm_90, 132 SMs, 139.8 GiB)"
  std::string Describe() const;
};

// Whether GPU `index` can be used, and what it is. Unavailable with the runtime's reason when
// there is no driver, no such device, or the binary has no code for its architecture (tests
// report themselves skipped with this message).
StatusOr<DeviceInfo> Probe(int index = 0);

// Selects GPU `index` for the calling thread (cudaSetDevice) after probing it.
StatusOr<DeviceInfo> Use(int index);

// A failed CUDA call as a Status: Internal "<what>: <cudaGetErrorString> (<error name>)";
// out-of-memory errors are Unavailable. Ok for cudaSuccess.
Status FromCuda(cudaError_t err, const std::string& what);

// The result of the kernel launches since the last check (cudaGetLastError), as a Status.
Status LastLaunch(const char* kernel);

// Device memory of one allocation. Move-only; frees on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Allocates `bytes` (replacing what it held). Out of memory: Unavailable naming `what`,
  // the size and the free memory of the device.
  Status Allocate(int64_t bytes, const std::string& what);
  // Allocates and copies `bytes` from host memory.
  Status Upload(const void* host, int64_t bytes, const std::string& what);
  // Grows to at least `bytes` (contents not kept); no-op when already large enough.
  Status Reserve(int64_t bytes, const std::string& what);

  void* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  int64_t bytes() const { return bytes_; }

 private:
  void Free();
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

// Copies between host and device on `stream`, then waits for it; errors name `what`.
Status CopyToDevice(void* dst, const void* src, int64_t bytes, cudaStream_t stream,
                    const std::string& what);
Status CopyToHost(void* dst, const void* src, int64_t bytes, cudaStream_t stream,
                  const std::string& what);

}  // namespace epserve::cuda
