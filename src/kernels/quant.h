// FP8 e4m3 activation quantization, one float32 scale per 128 consecutive values (the
// dispatch format of SPEC §2/§4: 1 byte per value plus 4 bytes per 128). scale = amax / 448
// (1 for an all-zero block); q = round-to-nearest-even(x / scale).
#pragma once

#include <cstdint>
#include <cstring>

namespace epserve::kernels {

inline int64_t Fp8ScaleCount(int64_t n) { return (n + 127) / 128; }

// UE8M0 scales (DeepSeek-V3.1 and later, `scale_fmt: "ue8m0"`): the smallest power of two >= s,
// from the bits as DeepSeek's fast_round_scale (the exponent, plus one unless the mantissa is
// zero). REQUIRES: s is positive and normal.
inline float RoundScaleUe8m0(float s) {
  uint32_t bits;
  std::memcpy(&bits, &s, 4);
  bits = ((bits & 0x7fffff) != 0 ? (bits & 0x7f800000u) + 0x800000u : bits & 0x7f800000u);
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// q: n bytes; scales: Fp8ScaleCount(n) floats. The scalar reference; hot paths call the
// vectorized twin QuantizeBlocksFp8 (quant_silu.h), tested to give identical bytes and scales.
// With ue8m0 each scale is rounded up to a power of two first (RoundScaleUe8m0).
void QuantizeRowFp8(const float* x, int64_t n, uint8_t* q, float* scales, bool ue8m0 = false);
void DequantizeRowFp8(const uint8_t* q, const float* scales, int64_t n, float* out);
// x <- dequantize(quantize(x)): what a receiver sees, for single-process runs that must match.
void RoundTripFp8(float* x, int64_t n, bool ue8m0 = false);

}  // namespace epserve::kernels
