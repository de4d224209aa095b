#include "cuda/device.h"

#include <cstdio>
#include <utility>

namespace epserve::cuda {

namespace {

std::string Gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GiB", static_cast<double>(bytes) / (1LL << 30));
  return buf;
}

std::string FreeMemory() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return "free memory unknown";
  return Gib(static_cast<int64_t>(free)) + " free of " + Gib(static_cast<int64_t>(total));
}

}  // namespace

std::string DeviceInfo::Describe() const {
  return "cuda:" + std::to_string(index) + " (" + name + ", sm_" + std::to_string(sm_major) +
         std::to_string(sm_minor) + ", " + std::to_string(num_sms) + " SMs, " + Gib(total_bytes) +
         ")";
}

Status FromCuda(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status::Ok();
  const std::string msg =
      what + ": " + cudaGetErrorString(err) + " (" + cudaGetErrorName(err) + ")";
  if (err == cudaErrorMemoryAllocation) return Status::Unavailable(msg + ", " + FreeMemory());
  return Status::Internal(msg);
}

Status LastLaunch(const char* kernel) {
  return FromCuda(cudaGetLastError(), std::string("launching ") + kernel);
}

StatusOr<DeviceInfo> Probe(int index) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: leave no error behind for the next call
    return Status::Unavailable(std::string("no usable CUDA device: ") + cudaGetErrorString(err));
  }
  if (index < 0 || index >= count)
    return Status::Unavailable("cuda:" + std::to_string(index) + ": no such device (" +
                               std::to_string(count) + " visible)");
  cudaDeviceProp prop{};
  RETURN_IF_ERROR(FromCuda(cudaGetDeviceProperties(&prop, index),
                           "cuda:" + std::to_string(index) + ": reading its properties"));
  DeviceInfo info{.index = index,
                  .name = prop.name,
                  .sm_major = prop.major,
                  .sm_minor = prop.minor,
                  .num_sms = prop.multiProcessorCount,
                  .total_bytes = static_cast<int64_t>(prop.totalGlobalMem)};
  return info;
}

StatusOr<DeviceInfo> Use(int index) {
  ASSIGN_OR_RETURN(DeviceInfo info, Probe(index));
  RETURN_IF_ERROR(
      FromCuda(cudaSetDevice(index), "cuda:" + std::to_string(index) + ": selecting it"));
  size_t free = 0, total = 0;
  RETURN_IF_ERROR(
      FromCuda(cudaMemGetInfo(&free, &total), info.Describe() + ": reading free memory"));
  info.free_bytes = static_cast<int64_t>(free);
  return info;
}

DeviceBuffer::~DeviceBuffer() { Free(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Free();
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::Free() {
  if (ptr_ != nullptr) (void)cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

Status DeviceBuffer::Allocate(int64_t bytes, const std::string& what) {
  Free();
  if (bytes <= 0) return Status::Ok();
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, static_cast<size_t>(bytes));
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return FromCuda(err, "allocating " + what + " (" + Gib(bytes) + ")");
  }
  ptr_ = p;
  bytes_ = bytes;
  return Status::Ok();
}

Status DeviceBuffer::Upload(const void* host, int64_t bytes, const std::string& what) {
  RETURN_IF_ERROR(Allocate(bytes, what));
  if (bytes <= 0) return Status::Ok();
  return FromCuda(cudaMemcpy(ptr_, host, static_cast<size_t>(bytes), cudaMemcpyHostToDevice),
                  "copying " + what + " to the device");
}

Status DeviceBuffer::Reserve(int64_t bytes, const std::string& what) {
  if (bytes <= bytes_) return Status::Ok();
  return Allocate(bytes, what);
}

Status CopyToDevice(void* dst, const void* src, int64_t bytes, cudaStream_t stream,
                    const std::string& what) {
  if (bytes <= 0) return Status::Ok();
  RETURN_IF_ERROR(FromCuda(
      cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream),
      "copying " + what + " to the device"));
  return FromCuda(cudaStreamSynchronize(stream), "copying " + what + " to the device");
}

Status CopyToHost(void* dst, const void* src, int64_t bytes, cudaStream_t stream,
                  const std::string& what) {
  if (bytes <= 0) return Status::Ok();
  RETURN_IF_ERROR(FromCuda(
      cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream),
      "copying " + what + " to the host"));
  return FromCuda(cudaStreamSynchronize(stream), "copying " + what + " to the host");
}

}  // namespace epserve::cuda
