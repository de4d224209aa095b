// Scalar reference twins of the matmul kernels (double accumulation), and DequantizeRow.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "kernels/matmul.h"
#include "kernels/matmul_i8.h"

namespace epserve::kernels {

void DequantizeRow(const WeightView& w, int64_t row, int64_t k_begin, int64_t count, float* out) {
  switch (w.dtype) {
    case DType::kF32: {
      std::memcpy(out, static_cast<const float*>(w.data) + row * w.cols + k_begin, count * 4);
      return;
    }
    case DType::kBF16: {
      const uint16_t* src = static_cast<const uint16_t*>(w.data) + row * w.cols + k_begin;
      for (int64_t i = 0; i < count; ++i) {
        uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
        std::memcpy(out + i, &bits, 4);
      }
      return;
    }
    case DType::kF8E4M3: {
      const uint8_t* src = static_cast<const uint8_t*>(w.data) + row * w.cols;
      const float* scale_row =
          w.scale + ((row + w.scale_row_offset) / kFp8BlockSize) * w.ScaleCols();
      for (int64_t i = 0; i < count;) {
        int64_t k = k_begin + i;
        int64_t block_end = std::min(k_begin + count, (k / kFp8BlockSize + 1) * kFp8BlockSize);
        float s = scale_row[k / kFp8BlockSize];
        for (; k < block_end; ++k, ++i) out[i] = kFp8E4M3ToF32[src[k]] * s;
      }
      return;
    }
    case DType::kI8Packed: {
      for (int64_t i = 0; i < count; ++i) out[i] = I8PackedValue(w, row, k_begin + i);
      return;
    }
    case DType::kF4E2M1: {  // from the bit fields (fp4.h's decoder uses a table)
      const uint8_t* src = static_cast<const uint8_t*>(w.data) + row * (w.cols / 2);
      const uint8_t* scales = w.scale_ue8m0 + row * (w.cols / kFp4BlockSize);
      for (int64_t i = 0; i < count; ++i) {
        const int64_t k = k_begin + i;
        const int n = (src[k / 2] >> (4 * (k % 2))) & 15;
        const int exp = (n >> 1) & 3, mant = n & 1;
        const double mag = exp == 0 ? 0.5 * mant : (1.0 + 0.5 * mant) * std::ldexp(1.0, exp - 1);
        const int b = scales[k / kFp4BlockSize];
        const double scale = b == 255 ? std::nan("") : std::ldexp(1.0, b - 127);
        out[i] = static_cast<float>((n & 8 ? -mag : mag) * scale);
      }
      return;
    }
    case DType::kF8E8M0:
    case DType::kI8:
    case DType::kI32:
    case DType::kI64:
      break;
  }
  CHECK(false) << "DequantizeRow of " << DTypeName(w.dtype) << ", not a weight dtype";
}

void MatMulTReference(const MatMulTArgs& args) {
  const WeightView& w = args.w;
  const int64_t M = args.num_rows, N = w.rows, K = w.cols;
  const int64_t xs = args.x_stride ? args.x_stride : N;
  const int64_t ys = args.y_stride ? args.y_stride : K;
  std::vector<double> acc(K);
  std::vector<float> row(K);
  for (int64_t m = 0; m < M; ++m) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t k = 0; k < K; ++k) DequantizeRow(w, n, k, 1, &row[k]);
      for (int64_t k = 0; k < K; ++k) acc[k] += static_cast<double>(args.x[m * xs + n]) * row[k];
    }
    for (int64_t k = 0; k < K; ++k) args.y[m * ys + k] = static_cast<float>(acc[k]);
  }
}

float RoundToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7f800000u) == 0) {
    bits &= 0x80000000u;  // zero or denormal: signed zero
  } else if ((bits & 0x7fffffffu) > 0x7f800000u) {
    bits |= 0x00400000u;  // NaN: quiet
  } else {
    bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  }
  bits &= 0xffff0000u;
  std::memcpy(&x, &bits, 4);
  return x;
}

void MatMulReference(const MatMulArgs& args) {
  const WeightView& w = args.w;
  const int64_t M = args.num_rows, N = w.rows, K = w.cols;
  const int64_t xs = args.x_stride ? args.x_stride : K;
  const int64_t ys = args.y_stride ? args.y_stride : N;
  if (w.dtype == DType::kI8Packed) {  // int8 weights: the int8 kernel's own twin, any compute
    QuantizedRows q;
    QuantizeRowsScalar(args.x, M, K, xs, q);
    I8MatMulRowsScalar(
        {.x = q.View(), .w = w, .y = args.y, .y_stride = ys, .accumulate = args.accumulate}, 0, N);
    return;
  }
  const bool fast = args.compute == Compute::kFast;
  auto operand = [fast](float v) { return fast ? RoundToBf16(v) : v; };
  std::vector<float> row(K);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) {
      DequantizeRow(w, n, k, 1, &row[k]);
      row[k] = operand(row[k]);
    }
    for (int64_t m = 0; m < M; ++m) {
      double acc = args.accumulate ? args.y[m * ys + n] : 0.0;
      for (int64_t k = 0; k < K; ++k)
        acc += static_cast<double>(operand(args.x[m * xs + k])) * row[k];
      args.y[m * ys + n] = static_cast<float>(acc);
    }
  }
}

}  // namespace epserve::kernels
