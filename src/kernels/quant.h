// FP8 e4m3 activation quantization, one float32 scale per 128 consecutive values (the
// dispatch format of SPEC §2/§4: 1 byte per value plus 4 bytes per 128). scale = amax / 448
// (1 for an all-zero block); q = round-to-nearest-even(x / scale).
#pragma once

#include <cstdint>

namespace epserve::kernels {

inline int64_t Fp8ScaleCount(int64_t n) { return (n + 127) / 128; }

// q: n bytes; scales: Fp8ScaleCount(n) floats. The scalar reference; hot paths call the
// vectorized twin QuantizeBlocksFp8 (quant_silu.h), tested to give identical bytes and scales.
void QuantizeRowFp8(const float* x, int64_t n, uint8_t* q, float* scales);
void DequantizeRowFp8(const uint8_t* q, const float* scales, int64_t n, float* out);
// x <- dequantize(quantize(x)): what a receiver sees, for single-process runs that must match.
void RoundTripFp8(float* x, int64_t n);

}  // namespace epserve::kernels
