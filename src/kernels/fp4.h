// DeepSeek-V4's FP4 e2m1 weights (tensor/weight_view.h, kF4E2M1) decoded to float: every value
// (an e2m1 value times a power-of-two UE8M0 scale) is exact in float32. The table-driven decoder
// the matmul kernels use; its scalar twin is DequantizeRow (matmul_reference.cc), written from
// the bit fields.
#pragma once

#include <cstdint>

#include "tensor/weight_view.h"

namespace epserve::kernels {

// out[k] = W[row, k] for k < w.cols. REQUIRES: w.dtype == kF4E2M1.
inline void DecodeFp4Row(const WeightView& w, int64_t row, float* out) {
  const int64_t blocks = w.cols / kFp4BlockSize;
  const uint8_t* p = static_cast<const uint8_t*>(w.data) + row * (w.cols / 2);
  const uint8_t* s = w.scale_ue8m0 + row * blocks;
  for (int64_t b = 0; b < blocks; ++b, p += kFp4BlockSize / 2, out += kFp4BlockSize) {
    const float scale = Ue8m0ToF32(s[b]);
    for (int j = 0; j < kFp4BlockSize / 2; ++j) {
      out[2 * j] = kFp4E2M1ToF32[p[j] & 15] * scale;
      out[2 * j + 1] = kFp4E2M1ToF32[p[j] >> 4] * scale;
    }
  }
}

}  // namespace epserve::kernels
