// Random fills for weights and caches made on the device (DeviceWeights::Synthetic, the GPU
// decode benchmark's latent cache). Counter-based: element i is splitmix64 of a key made from
// (seed, stream) plus i times the golden ratio, so the values do not depend on the grid, and a
// tensor of billions of elements fills at memory speed with nothing on the host.
#include <cuda_fp8.h>

#include <string>

#include "cuda/device.h"
#include "cuda/synthetic.h"

namespace epserve::cuda {

namespace {

constexpr int kThreads = 256;
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

__host__ __device__ __forceinline__ uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1) with 24 random bits.
__device__ __forceinline__ float Uniform(uint64_t key, int64_t i) {
  const uint64_t r = Mix(key + static_cast<uint64_t>(i) * kGolden);
  return static_cast<float>(r >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

// Round to nearest even (as tensor/dtype.h's F32ToBf16; the values here are finite).
__device__ __forceinline__ uint16_t ToBf16(float f) {
  const uint32_t u = __float_as_uint(f);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

template <FillFormat F>
__global__ void FillKernel(void* out, int64_t n, uint64_t key, float mean, float half_width) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float u = Uniform(key, i);
    if constexpr (F == FillFormat::kF32) {
      static_cast<float*>(out)[i] = mean + u * half_width;
    } else if constexpr (F == FillFormat::kBF16) {
      static_cast<uint16_t*>(out)[i] = ToBf16(mean + u * half_width);
    } else {
      static_cast<uint8_t*>(out)[i] =
          static_cast<uint8_t>(__nv_cvt_float_to_fp8(u * 448.0f, __NV_SATFINITE, __NV_E4M3));
    }
  }
}

}  // namespace

Status FillUniform(const FillArgs& a, cudaStream_t stream) {
  if (a.n <= 0) return Status::Ok();
  if (a.format == FillFormat::kFP8 && a.mean != 0)
    return Status::InvalidArgument("FillUniform: FP8 values are centred on 0");
  // One key per (seed, stream): two rounds so nearby seeds and streams land far apart.
  const uint64_t key = Mix(Mix(a.seed + kGolden) ^ (a.stream * 0xd1b54a32d192ed03ull + 1));
  const int64_t want = (a.n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(want < 65535 * 32 ? want : 65535 * 32);
  switch (a.format) {
    case FillFormat::kF32:
      FillKernel<FillFormat::kF32>
          <<<blocks, kThreads, 0, stream>>>(a.out, a.n, key, a.mean, a.half_width);
      break;
    case FillFormat::kBF16:
      FillKernel<FillFormat::kBF16>
          <<<blocks, kThreads, 0, stream>>>(a.out, a.n, key, a.mean, a.half_width);
      break;
    case FillFormat::kFP8:
      FillKernel<FillFormat::kFP8><<<blocks, kThreads, 0, stream>>>(a.out, a.n, key, 0.0f, 1.0f);
      break;
  }
  return LastLaunch("FillUniform");
}

}  // namespace epserve::cuda
