#include "kernels/matmul.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/check.h"

namespace epserve::kernels {

namespace {

constexpr int64_t kRowTile = 4;     // weight rows dequantized together
constexpr int64_t kKChunk = 512;    // multiple of the FP8 block (128)

// Eight independent partial sums so the compiler vectorizes without reassociating.
inline float Dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

}  // namespace

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
      const float* scale_row = w.scale + ((row + w.scale_row_offset) / kFp8BlockSize) * w.ScaleCols();
      for (int64_t i = 0; i < count;) {
        int64_t k = k_begin + i;
        int64_t block_end = std::min(k_begin + count, (k / kFp8BlockSize + 1) * kFp8BlockSize);
        float s = scale_row[k / kFp8BlockSize];
        for (; k < block_end; ++k, ++i) out[i] = kFp8E4M3ToF32[src[k]] * s;
      }
      return;
    }
  }
}

void MatMul(const MatMulArgs& args, ThreadPool& pool) {
  const WeightView& w = args.w;
  const int64_t M = args.num_rows, N = w.rows, K = w.cols;
  const int64_t xs = args.x_stride ? args.x_stride : K;
  const int64_t ys = args.y_stride ? args.y_stride : N;
  if (M == 0 || N == 0) return;
  pool.ParallelFor(N, kRowTile, [&](size_t nb, size_t ne, int) {
    alignas(64) float buf[kRowTile][kKChunk];
    for (int64_t n0 = nb; n0 < static_cast<int64_t>(ne); n0 += kRowTile) {
      const int64_t rows = std::min<int64_t>(kRowTile, ne - n0);
      if (!args.accumulate)
        for (int64_t m = 0; m < M; ++m) std::fill_n(args.y + m * ys + n0, rows, 0.0f);
      for (int64_t k0 = 0; k0 < K; k0 += kKChunk) {
        const int64_t kc = std::min(kKChunk, K - k0);
        for (int64_t r = 0; r < rows; ++r) DequantizeRow(w, n0 + r, k0, kc, buf[r]);
        for (int64_t m = 0; m < M; ++m) {
          const float* xr = args.x + m * xs + k0;
          float* yr = args.y + m * ys + n0;
          for (int64_t r = 0; r < rows; ++r) yr[r] += Dot(xr, buf[r], kc);
        }
      }
    }
  });
}

void MatMulT(const MatMulTArgs& args, ThreadPool& pool) {
  const WeightView& w = args.w;
  const int64_t M = args.num_rows, N = w.rows, K = w.cols;
  const int64_t xs = args.x_stride ? args.x_stride : N;
  const int64_t ys = args.y_stride ? args.y_stride : K;
  if (M == 0 || K == 0) return;
  pool.ParallelFor(K, kKChunk, [&](size_t kb, size_t ke, int) {
    alignas(64) float buf[kKChunk];
    for (int64_t k0 = kb; k0 < static_cast<int64_t>(ke); k0 += kKChunk) {
      const int64_t kc = std::min<int64_t>(kKChunk, ke - k0);
      for (int64_t m = 0; m < M; ++m) std::fill_n(args.y + m * ys + k0, kc, 0.0f);
      for (int64_t n = 0; n < N; ++n) {
        DequantizeRow(w, n, k0, kc, buf);
        for (int64_t m = 0; m < M; ++m) {
          const float xv = args.x[m * xs + n];
          float* yr = args.y + m * ys + k0;
          for (int64_t i = 0; i < kc; ++i) yr[i] += xv * buf[i];
        }
      }
    }
  });
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

void MatMulReference(const MatMulArgs& args) {
  const WeightView& w = args.w;
  const int64_t M = args.num_rows, N = w.rows, K = w.cols;
  const int64_t xs = args.x_stride ? args.x_stride : K;
  const int64_t ys = args.y_stride ? args.y_stride : N;
  std::vector<float> row(K);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) DequantizeRow(w, n, k, 1, &row[k]);
    for (int64_t m = 0; m < M; ++m) {
      double acc = args.accumulate ? args.y[m * ys + n] : 0.0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(args.x[m * xs + k]) * row[k];
      args.y[m * ys + n] = static_cast<float>(acc);
    }
  }
}

}  // namespace epserve::kernels
