// Element conversions of the weight and cache formats on the device, shared by every kernel:
// the device twins of tensor/dtype.h's Fp8E4M3ToF32, Bf16ToF32 and F32ToBf16.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace epserve::cuda {

// e4m3fn -> f32, exact (every e4m3 value is a half; 0x7F/0xFF become NaN).
__device__ __forceinline__ float Fp8ToF32(uint8_t v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(v, __NV_E4M3)));
}

__device__ __forceinline__ float Bf16BitsToF32(uint16_t v) {
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}

// Round to nearest even, NaN kept a NaN (as tensor/dtype.h's F32ToBf16).
__device__ __forceinline__ uint16_t F32ToBf16Bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace epserve::cuda
