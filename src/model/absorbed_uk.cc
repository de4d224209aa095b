#include "model/absorbed_uk.h"

#include <cstring>

#include "base/check.h"
#include "tensor/dtype.h"

namespace epserve {

namespace {

int64_t Align64(int64_t n) { return (n + 63) / 64 * 64; }

// The dtype W_ukᵀ is kept in (see the header).
DType TransposedDType(const WeightView& uk) {
  if (uk.dtype != DType::kF8E4M3) return uk.dtype;
  return uk.scale_row_offset % kFp8BlockSize == 0 ? DType::kF8E4M3 : DType::kBF16;
}

// out[n, k] = uk[k, n] in `dtype` (uk: [K, N], out: [N, K]).
void Transpose(const WeightView& uk, DType dtype, uint8_t* out) {
  const int64_t K = uk.rows, N = uk.cols;
  const auto* src = static_cast<const uint8_t*>(uk.data);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t i = k * N + n, o = n * K + k;
      switch (uk.dtype) {
        case DType::kF32:
          std::memcpy(out + 4 * o, src + 4 * i, 4);
          break;
        case DType::kBF16:
          std::memcpy(out + 2 * o, src + 2 * i, 2);
          break;
        case DType::kF8E4M3:
          if (dtype == DType::kF8E4M3) {
            out[o] = src[i];
          } else {
            const float s = uk.scale[(k + uk.scale_row_offset) / kFp8BlockSize * uk.ScaleCols() +
                                     n / kFp8BlockSize];
            const uint16_t v = F32ToBf16(Fp8E4M3ToF32(src[i]) * s);
            std::memcpy(out + 2 * o, &v, 2);
          }
          break;
        case DType::kI8Packed:
        case DType::kF4E2M1:
        case DType::kF8E8M0:
        case DType::kI8:
        case DType::kI32:
        case DType::kI64:
          CHECK(false) << "kv_b_proj is never " << DTypeName(uk.dtype);
      }
    }
}

}  // namespace

AbsorbedUk::AbsorbedUk(const ModelConfig& c, const ModelWeights& w, int h0, int heads)
    : heads_(heads) {
  const int layers = static_cast<int>(w.layers.size() + w.mtp.size());
  const int64_t nope = c.qk_nope_head_dim, stride = c.qk_nope_head_dim + c.v_head_dim;
  // Sizes first: one allocation, every matrix 64-byte aligned.
  std::vector<WeightView> uks;
  int64_t bytes = 0, scales = 0;
  for (int l = 0; l < layers; ++l)
    for (int h = 0; h < heads; ++h) {
      const WeightView& kv_b = w.Layer(l).attn.kv_b;
      CHECK(!kv_b.empty()) << "layer " << l << " has no kv_b";
      uks.push_back(kv_b.RowSlice((h0 + h) * stride, nope));
      const DType dt = TransposedDType(uks.back());
      bytes += Align64(uks.back().rows * uks.back().cols * static_cast<int64_t>(DTypeSize(dt)));
      if (dt == DType::kF8E4M3) {
        const WeightView shape{.rows = uks.back().cols, .cols = uks.back().rows};
        scales += shape.ScaleRows() * shape.ScaleCols();
      }
    }
  data_.resize(bytes);
  scales_.resize(scales);
  int64_t at = 0, sat = 0;
  for (const WeightView& uk : uks) {
    const DType dt = TransposedDType(uk);
    WeightView t{.dtype = dt, .rows = uk.cols, .cols = uk.rows, .data = data_.data() + at};
    Transpose(uk, dt, data_.data() + at);
    at += Align64(t.rows * t.cols * static_cast<int64_t>(DTypeSize(dt)));
    if (dt == DType::kF8E4M3) {
      // Block (i, j) of W_ukᵀ is block (j, i) of W_uk; W_uk's row blocks start at
      // scale_row_offset / 128 (a whole block, TransposedDType checked).
      float* s = scales_.data() + sat;
      const int64_t row_block0 = uk.scale_row_offset / kFp8BlockSize;
      for (int64_t i = 0; i < t.ScaleRows(); ++i)
        for (int64_t j = 0; j < t.ScaleCols(); ++j)
          s[i * t.ScaleCols() + j] = uk.scale[(row_block0 + j) * uk.ScaleCols() + i];
      t.scale = s;
      sat += t.ScaleRows() * t.ScaleCols();
    }
    views_.push_back(t);
  }
}

}  // namespace epserve
