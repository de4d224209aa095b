// MatMul and MatMulT: Highway kernels with runtime dispatch (one dispatch per call). The
// per-target code lives in matmul_decode-inl.h / matmul_blocked-inl.h (shared with the grouped
// expert GEMM); the scalar twins are in matmul_reference.cc.
#include "kernels/matmul.h"

#include <algorithm>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/matmul_blocked-inl.h"
#include "kernels/matmul_decode-inl.h"
#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace epserve::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void MatMulRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  GemmRows(a, n_begin, n_end);
}

// Columns [k_begin, k_end) of y[M, K] = x[M, N] W[N, K] (strides resolved). A slab of up to
// kSlabRows weight rows x kSlabCols columns is dequantized once and used for every x row; each
// y element is one FMA chain over n in order, whatever the column split.
template <DType kDType>
void MatMulTColumnsT(const MatMulTArgs& a, int64_t k_begin, int64_t k_end) {
  constexpr int64_t kSlabRows = 128, kSlabCols = 64;
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const int64_t M = a.num_rows, N = a.w.rows;
  HWY_ALIGN_MAX float slab[kSlabRows][kSlabCols + HWY_MAX_BYTES / sizeof(float)];
  HWY_ALIGN_MAX float tmp[HWY_MAX_BYTES / sizeof(float)];
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kSlabCols) {
    const int64_t kc = std::min(kSlabCols, k_end - k0);
    for (int64_t n0 = 0; n0 < N; n0 += kSlabRows) {
      const int64_t nn = std::min(kSlabRows, N - n0);
      for (int64_t n = 0; n < nn; ++n) {
        DequantizeSpan<kDType>(df, a.w, n0 + n, k0, kc, slab[n]);
        std::fill(slab[n] + kc, slab[n] + (kc + L - 1) / L * L, 0.0f);
      }
      for (int64_t m = 0; m < M; ++m) {
        const float* xr = a.x + m * a.x_stride + n0;
        float* yr = a.y + m * a.y_stride + k0;
        for (int64_t j = 0; j < kc; j += L) {
          const bool full = j + L <= kc;
          float* dst = full ? yr + j : tmp;
          if (!full) std::memcpy(tmp, yr + j, (kc - j) * sizeof(float));
          V acc = n0 == 0 ? hn::Zero(df) : hn::LoadU(df, dst);
          for (int64_t n = 0; n < nn; ++n)
            acc = hn::MulAdd(hn::Set(df, xr[n]), hn::Load(df, slab[n] + j), acc);
          hn::StoreU(acc, df, dst);
          if (!full) std::memcpy(yr + j, tmp, (kc - j) * sizeof(float));
        }
      }
    }
  }
}

void MatMulTColumns(const MatMulTArgs& a, int64_t k_begin, int64_t k_end) {
  switch (a.w.dtype) {
    case DType::kF32:
      return MatMulTColumnsT<DType::kF32>(a, k_begin, k_end);
    case DType::kBF16:
      return MatMulTColumnsT<DType::kBF16>(a, k_begin, k_end);
    case DType::kF8E4M3:
      return MatMulTColumnsT<DType::kF8E4M3>(a, k_begin, k_end);
  }
}

}  // namespace epserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace epserve::kernels {

HWY_EXPORT(MatMulRows);
HWY_EXPORT(MatMulTColumns);

namespace {
// Rows per work unit: a multiple of 16 holding at least 32 KB of weights, so small matrices run
// on fewer threads than a wake-up would cost.
size_t RowGrain(const WeightView& w) {
  const int64_t row_bytes = std::max<int64_t>(1, w.cols * static_cast<int64_t>(DTypeSize(w.dtype)));
  const int64_t rows = (int64_t{32} << 10) / row_bytes;
  return static_cast<size_t>(std::max<int64_t>(16, (rows + 15) / 16 * 16));
}
}  // namespace

void MatMul(const MatMulArgs& args, ThreadPool& pool) {
  MatMulArgs a = args;
  const int64_t N = a.w.rows, K = a.w.cols;
  if (a.num_rows == 0 || N == 0) return;
  if (a.x_stride == 0) a.x_stride = K;
  if (a.y_stride == 0) a.y_stride = N;
  const auto rows = HWY_DYNAMIC_DISPATCH(MatMulRows);
  pool.ParallelFor(N, RowGrain(a.w), [&](size_t b, size_t e, int) {
    rows(a, static_cast<int64_t>(b), static_cast<int64_t>(e));
  });
}

void MatMulT(const MatMulTArgs& args, ThreadPool& pool) {
  MatMulTArgs a = args;
  const int64_t N = a.w.rows, K = a.w.cols;
  if (a.num_rows == 0 || K == 0) return;
  if (a.x_stride == 0) a.x_stride = N;
  if (a.y_stride == 0) a.y_stride = K;
  if (N == 0) {
    for (int64_t m = 0; m < a.num_rows; ++m) std::fill_n(a.y + m * a.y_stride, K, 0.0f);
    return;
  }
  const auto columns = HWY_DYNAMIC_DISPATCH(MatMulTColumns);
  const int64_t bytes = N * K * static_cast<int64_t>(DTypeSize(a.w.dtype));
  const size_t grain = bytes < (int64_t{64} << 10) ? static_cast<size_t>(K) : 64;
  pool.ParallelFor(K, grain, [&](size_t b, size_t e, int) {
    columns(a, static_cast<int64_t>(b), static_cast<int64_t>(e));
  });
}

}  // namespace epserve::kernels
#endif  // HWY_ONCE
