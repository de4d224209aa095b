// Counter-based random fills of device memory (synthetic.cu): the values of
// DeviceWeights::Synthetic and of the GPU decode benchmark's latent cache. Element i of `out`
// is a function of (seed, stream, i) alone (splitmix64), whatever the launch shape, so a fill
// is deterministic on any GPU and needs nothing on the host.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"

namespace epserve::cuda {

enum class FillFormat {
  kF32,   // mean + u * half_width, u uniform in [-1, 1) (24 random bits)
  kBF16,  // the same, rounded to bf16 (nearest even)
  kFP8,   // e4m3 of u * 448: times a block scale of half_width / 448 it is u * half_width
};

struct FillArgs {
  void* out = nullptr;  // device memory of n elements of `format`
  int64_t n = 0;
  FillFormat format = FillFormat::kF32;
  uint64_t seed = 0, stream = 0;
  float mean = 0, half_width = 1;  // kFP8: mean must be 0 and half_width is unused
};

// Launches the fill on `stream` (asynchronous); the launch's Status.
Status FillUniform(const FillArgs& args, cudaStream_t stream);

}  // namespace epserve::cuda
