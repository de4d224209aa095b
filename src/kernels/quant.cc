#include "kernels/quant.h"

#include <algorithm>
#include <cmath>

#include "kernels/quant_silu.h"
#include "tensor/dtype.h"

namespace epserve::kernels {

void QuantizeRowFp8(const float* x, int64_t n, uint8_t* q, float* scales, bool ue8m0) {
  for (int64_t b = 0; b < n; b += 128) {
    const int64_t e = std::min<int64_t>(n, b + 128);
    float amax = 0.0f;
    for (int64_t i = b; i < e; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    float scale = amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
    if (ue8m0) scale = RoundScaleUe8m0(scale);
    scales[b / 128] = scale;
    const float inv = 1.0f / scale;
    for (int64_t i = b; i < e; ++i) q[i] = F32ToFp8E4M3(x[i] * inv);
  }
}

void DequantizeRowFp8(const uint8_t* q, const float* scales, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = kFp8E4M3ToF32[q[i]] * scales[i / 128];
}

void RoundTripFp8(float* x, int64_t n, bool ue8m0) {
  uint8_t q[128];
  float s;
  for (int64_t b = 0; b < n; b += 128) {
    const int64_t len = std::min<int64_t>(128, n - b);
    QuantizeBlocksFp8(x + b, len, q, &s, ue8m0);
    DequantizeRowFp8(q, &s, len, x + b);
  }
}

}  // namespace epserve::kernels
