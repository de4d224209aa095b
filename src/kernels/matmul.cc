// MatMul and MatMulT: Highway kernels with runtime dispatch (one dispatch per call). The
// per-target code lives in matmul_decode-inl.h / matmul_panel-inl.h (shared with the grouped
// expert GEMM); the scalar twins are in matmul_reference.cc.
#include "kernels/matmul.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "kernels/matmul_i8.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/matmul_decode-inl.h"
#include "kernels/matmul_panel-inl.h"
#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace epserve::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void MatMulRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  GemmRows(a, n_begin, n_end);
}

// Columns [k_begin, k_end) of y[M, K] = x[M, N] W[N, K] (strides resolved). A slab of up to
// kSlabRows weight rows x kSlabCols columns is converted once (LoadWeight, without the FP8
// block scale) and used for every x row; each y element is one FMA chain over n in order of
// (x[m, n] * scale(n, block)) * w, whatever the column split: the scale multiplies the scalar x
// once per row and block instead of every weight. The multiply is
// register-blocked (kTRows x rows times kTVecs vectors of columns, all independent chains) and
// continues each chain through an L1 copy of the y block between slabs, which is exact.
constexpr int64_t kTSlabRows = 128, kTSlabCols = 64;
constexpr int kTVecs = 4;
constexpr int kTRows = kVecRegs == 32 ? 4 : 2;

template <int kRows, class DF>
HWY_INLINE void SlabTile(DF df, const float* HWY_RESTRICT x, int64_t x_stride,
                         const float* HWY_RESTRICT row_scale, const float* HWY_RESTRICT slab,
                         int64_t slab_stride, int64_t nn, float* HWY_RESTRICT acc_rows,
                         int64_t acc_stride, int vecs) {
  using V = hn::Vec<DF>;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  V acc[kRows][kTVecs];
  HWY_UNROLL(4)
  for (int m = 0; m < kRows; ++m) {
    HWY_UNROLL(4)
    for (int v = 0; v < kTVecs; ++v)
      acc[m][v] = v < vecs ? hn::Load(df, acc_rows + m * acc_stride + v * L) : hn::Zero(df);
  }
  if (vecs == kTVecs) {
    for (int64_t n = 0; n < nn; ++n) {
      V w[kTVecs];
      HWY_UNROLL(4)
      for (int v = 0; v < kTVecs; ++v) w[v] = hn::Load(df, slab + n * slab_stride + v * L);
      HWY_UNROLL(4)
      for (int m = 0; m < kRows; ++m) {
        const V xb = hn::Set(df, x[m * x_stride + n] * row_scale[n]);
        HWY_UNROLL(4)
        for (int v = 0; v < kTVecs; ++v) acc[m][v] = hn::MulAdd(xb, w[v], acc[m][v]);
      }
    }
  } else {
    for (int64_t n = 0; n < nn; ++n) {
      HWY_UNROLL(4)
      for (int m = 0; m < kRows; ++m) {
        const V xb = hn::Set(df, x[m * x_stride + n] * row_scale[n]);
        for (int v = 0; v < vecs; ++v)
          acc[m][v] = hn::MulAdd(xb, hn::Load(df, slab + n * slab_stride + v * L), acc[m][v]);
      }
    }
  }
  HWY_UNROLL(4)
  for (int m = 0; m < kRows; ++m) {
    HWY_UNROLL(4)
    for (int v = 0; v < kTVecs; ++v)
      if (v < vecs) hn::Store(acc[m][v], df, acc_rows + m * acc_stride + v * L);
  }
}

template <DType kDType>
void MatMulTColumnsT(const MatMulTArgs& a, int64_t k_begin, int64_t k_end) {
  const hn::ScalableTag<float> df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const int64_t M = a.num_rows, N = a.w.rows;
  constexpr int64_t kPad = HWY_MAX_BYTES / sizeof(float);
  constexpr int64_t kStride = kTSlabCols + kPad;
  HWY_ALIGN_MAX float slab[kTSlabRows][kStride];
  float row_scale[kTSlabRows];
  static_assert(kFp8BlockSize % kTSlabCols == 0, "a slab lies in one FP8 block");
  HWY_ALIGN_MAX float acc[kTRows][kStride];
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kTSlabCols) {
    const int64_t kc = std::min(kTSlabCols, k_end - k0);
    const int64_t vecs_total = (kc + L - 1) / L;
    for (int64_t n0 = 0; n0 < N; n0 += kTSlabRows) {
      const int64_t nn = std::min(kTSlabRows, N - n0);
      for (int64_t n = 0; n < nn; ++n) {
        // Unscaled weights; the row's block scale multiplies x (a slab never straddles a block).
        ConvertSpanUnscaled<kDType>(df, a.w, n0 + n, kc, slab[n], k0);
        row_scale[n] = LoadScale<kDType>(RowOf(a.w, n0 + n), k0 / kFp8BlockSize);
        std::fill(slab[n] + kc, slab[n] + vecs_total * L, 0.0f);
      }
      for (int64_t m0 = 0; m0 < M; m0 += kTRows) {
        const int rows = static_cast<int>(std::min<int64_t>(kTRows, M - m0));
        // The chains so far (y) or zero, padded to whole vectors.
        for (int r = 0; r < rows; ++r) {
          if (n0 == 0) {
            std::fill_n(acc[r], vecs_total * L, 0.0f);
          } else {
            std::memcpy(acc[r], a.y + (m0 + r) * a.y_stride + k0, kc * sizeof(float));
            std::fill(acc[r] + kc, acc[r] + vecs_total * L, 0.0f);
          }
        }
        const float* xr = a.x + m0 * a.x_stride + n0;
        for (int64_t v0 = 0; v0 < vecs_total; v0 += kTVecs) {
          const int vecs = static_cast<int>(std::min<int64_t>(kTVecs, vecs_total - v0));
          float* acc0 = &acc[0][0] + v0 * L;
          const float* slab0 = &slab[0][0] + v0 * L;
          switch (rows) {
            case 1:
              SlabTile<1>(df, xr, a.x_stride, row_scale, slab0, kStride, nn, acc0, kStride, vecs);
              break;
            case 2:
              SlabTile<2>(df, xr, a.x_stride, row_scale, slab0, kStride, nn, acc0, kStride, vecs);
              break;
            case 3:
              if constexpr (kTRows >= 3)
                SlabTile<3>(df, xr, a.x_stride, row_scale, slab0, kStride, nn, acc0, kStride, vecs);
              break;
            case 4:
              if constexpr (kTRows >= 4)
                SlabTile<4>(df, xr, a.x_stride, row_scale, slab0, kStride, nn, acc0, kStride, vecs);
              break;
            default:
              break;
          }
        }
        for (int r = 0; r < rows; ++r)
          std::memcpy(a.y + (m0 + r) * a.y_stride + k0, acc[r], kc * sizeof(float));
      }
    }
  }
}

// The same products for few rows of x without the slab: W is streamed row by row (each row's
// columns of the range are contiguous, so the read is one sequential stream), each weight
// vector converted in registers and multiplied by x[m, n] * scale (as in the slab kernel)
// into an L1-resident accumulator row per x row. The order of operations per y element is the
// slab kernel's (one FMA chain over n in order, starting from zero), so results are identical
// for any M and any column split.
constexpr int64_t kDirectMaxCols = 512;

template <DType kDType, int kM>
void MatMulTColumnsDirect(const MatMulTArgs& a, int64_t k_begin, int64_t k_end) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const int64_t N = a.w.rows;
  HWY_ALIGN_MAX float acc[kM][kDirectMaxCols + HWY_MAX_BYTES / sizeof(float)];
  for (int64_t c0 = k_begin; c0 < k_end; c0 += kDirectMaxCols) {
    const int64_t cols = std::min(kDirectMaxCols, k_end - c0);
    const int64_t padded = (cols + L - 1) / L * L;
    for (int m = 0; m < kM; ++m) std::fill_n(acc[m], padded, 0.0f);
    for (int64_t n = 0; n < N; ++n) {
      const WeightRow row = RowOf(a.w, n);
      float xn[kM];
      for (int m = 0; m < kM; ++m) xn[m] = a.x[m * a.x_stride + n];
      for (int64_t j = 0; j < cols;) {  // one FP8 block (or the range's end) at a time
        const int64_t k = c0 + j;
        const int64_t block_end = std::min(cols, (k / kFp8BlockSize + 1) * kFp8BlockSize - c0);
        const float s = LoadScale<kDType>(row, k / kFp8BlockSize);
        V xs[kM];
        for (int m = 0; m < kM; ++m) xs[m] = hn::Set(df, xn[m] * s);
        for (; j < block_end; j += L) {
          const V w = j + L <= block_end
                          ? LoadWeight<kDType>(df, row.data, c0 + j)
                          : LoadWeightTail<kDType>(df, row.data, c0 + j, block_end - j);
          for (int m = 0; m < kM; ++m)
            hn::Store(hn::MulAdd(xs[m], w, hn::Load(df, acc[m] + j)), df, acc[m] + j);
        }
      }
    }
    for (int m = 0; m < kM; ++m)
      std::memcpy(a.y + m * a.y_stride + c0, acc[m], cols * sizeof(float));
  }
}

template <DType kDType>
void MatMulTColumnsDispatch(const MatMulTArgs& a, int64_t k_begin, int64_t k_end) {
  switch (a.num_rows) {
    case 1:
      return MatMulTColumnsDirect<kDType, 1>(a, k_begin, k_end);
    case 2:
      return MatMulTColumnsDirect<kDType, 2>(a, k_begin, k_end);
    case 3:
      return MatMulTColumnsDirect<kDType, 3>(a, k_begin, k_end);
    case 4:
      return MatMulTColumnsDirect<kDType, 4>(a, k_begin, k_end);
    default:
      return MatMulTColumnsT<kDType>(a, k_begin, k_end);
  }
}

void MatMulTColumns(const MatMulTArgs& a, int64_t k_begin, int64_t k_end) {
  switch (a.w.dtype) {
    case DType::kF32:
      return MatMulTColumnsDispatch<DType::kF32>(a, k_begin, k_end);
    case DType::kBF16:
      return MatMulTColumnsDispatch<DType::kBF16>(a, k_begin, k_end);
    case DType::kF8E4M3:
      return MatMulTColumnsDispatch<DType::kF8E4M3>(a, k_begin, k_end);
    case DType::kI8Packed:
    case DType::kF4E2M1:
    case DType::kF8E8M0:
    case DType::kI8:
    case DType::kI32:
    case DType::kI64:
      break;
  }
  CHECK(false) << "MatMulT of " << DTypeName(a.w.dtype) << " weights";
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
  const int64_t row_bytes =
      std::max<int64_t>(1, w.dtype == DType::kI8Packed ? w.cols : w.RowBytes());
  const int64_t rows = (int64_t{32} << 10) / row_bytes;
  return static_cast<size_t>(std::max<int64_t>(16, (rows + 15) / 16 * 16));
}

// Columns per work unit of MatMulT: all of them for weights under 64 KB, else 512 (a multiple
// of the FP8 block, and one contiguous 512-column strip per row for the direct kernel).
size_t ColumnGrain(const WeightView& w) {
  const int64_t bytes = w.dtype == DType::kI8Packed ? w.rows * w.cols : w.rows * w.RowBytes();
  return bytes < (int64_t{64} << 10) ? static_cast<size_t>(w.cols) : 512;
}

MatMulArgs Resolved(const MatMulArgs& args) {
  MatMulArgs a = args;
  if (a.x_stride == 0) a.x_stride = a.w.cols;
  if (a.y_stride == 0) a.y_stride = a.w.rows;
  return a;
}

MatMulTArgs Resolved(const MatMulTArgs& args) {
  MatMulTArgs a = args;
  if (a.x_stride == 0) a.x_stride = a.w.rows;
  if (a.y_stride == 0) a.y_stride = a.w.cols;
  return a;
}

// Runs run(problem, begin, end) over [0, extent(p)) of every problem in units of grain(p),
// all problems' units in one ParallelFor (unit boundaries depend only on the shapes).
template <class Args, class Extent, class Grain, class Run>
void ForEachUnit(std::span<const Args> problems, ThreadPool& pool, Extent extent, Grain grain,
                 Run run) {
  std::vector<size_t> first_unit(problems.size() + 1, 0);
  for (size_t p = 0; p < problems.size(); ++p) {
    const size_t n = static_cast<size_t>(extent(problems[p])), g = grain(problems[p]);
    first_unit[p + 1] = first_unit[p] + (n + g - 1) / g;
  }
  if (first_unit.back() == 0) return;
  // A chunk's consecutive units of one problem run as one call: the kernels block and prefetch
  // across the whole range.
  pool.ParallelFor(first_unit.back(), 1, [&](size_t b, size_t e, int) {
    size_t p = std::upper_bound(first_unit.begin(), first_unit.end(), b) - first_unit.begin() - 1;
    for (size_t u = b; u < e; p++) {
      const size_t last = std::min(e, first_unit[p + 1]);
      const size_t n = static_cast<size_t>(extent(problems[p])), g = grain(problems[p]);
      const size_t begin = (u - first_unit[p]) * g, end = std::min(n, (last - first_unit[p]) * g);
      run(problems[p], static_cast<int64_t>(begin), static_cast<int64_t>(end));
      u = last;
    }
  });
}

// The inputs of a batch's int8 problems, quantized once for all threads: problem p reads
// inputs[index[p]] (problems with the same x share one), -1 for other weights.
struct QuantizedInputs {
  std::vector<QuantizedRows> inputs;
  std::vector<int> index;
};

void QuantizeInputs(std::span<const MatMulArgs> live, ThreadPool& pool, QuantizedInputs& q) {
  q.index.assign(live.size(), -1);
  std::vector<size_t> owner;  // the problem each input was quantized from
  for (size_t p = 0; p < live.size(); ++p) {
    const MatMulArgs& a = live[p];
    if (a.w.dtype != DType::kI8Packed) continue;
    for (size_t i = 0; i < owner.size() && q.index[p] < 0; ++i) {
      const MatMulArgs& o = live[owner[i]];
      if (o.x == a.x && o.x_stride == a.x_stride && o.num_rows == a.num_rows &&
          o.w.cols == a.w.cols)
        q.index[p] = static_cast<int>(i);
    }
    if (q.index[p] >= 0) continue;
    q.index[p] = static_cast<int>(owner.size());
    owner.push_back(p);
  }
  if (q.inputs.size() < owner.size()) q.inputs.resize(owner.size());
  for (size_t i = 0; i < owner.size(); ++i) {
    const MatMulArgs& a = live[owner[i]];
    QuantizeRows(a.x, a.num_rows, a.w.cols, a.x_stride, q.inputs[i], pool);
  }
}
}  // namespace

void MatMulBatch(std::span<const MatMulArgs> problems, ThreadPool& pool) {
  std::vector<MatMulArgs> live;
  live.reserve(problems.size());
  for (const MatMulArgs& p : problems)
    if (p.num_rows > 0 && p.w.rows > 0) live.push_back(Resolved(p));
  // Grows to the largest batch this thread has run. (A reference: the workers must see the
  // caller's buffers, not their own thread_local ones.)
  thread_local QuantizedInputs per_thread;
  QuantizedInputs& quantized = per_thread;
  QuantizeInputs(live, pool, quantized);
  const auto rows = HWY_DYNAMIC_DISPATCH(MatMulRows);
  ForEachUnit<MatMulArgs>(
      live, pool, [](const MatMulArgs& a) { return a.w.rows; },
      [](const MatMulArgs& a) { return RowGrain(a.w); },
      [&](const MatMulArgs& a, int64_t b, int64_t e) {
        const int q = quantized.index[&a - live.data()];
        if (q < 0) return rows(a, b, e);
        I8MatMulRows({.x = quantized.inputs[q].View(),
                      .w = a.w,
                      .y = a.y,
                      .y_stride = a.y_stride,
                      .accumulate = a.accumulate},
                     b, e);
      });
}

void MatMul(const MatMulArgs& args, ThreadPool& pool) { MatMulBatch({&args, 1}, pool); }

void MatMulTBatch(std::span<const MatMulTArgs> problems, ThreadPool& pool) {
  std::vector<MatMulTArgs> live;
  live.reserve(problems.size());
  for (const MatMulTArgs& p : problems) {
    if (p.num_rows == 0 || p.w.cols == 0) continue;
    const MatMulTArgs a = Resolved(p);
    if (a.w.rows == 0) {
      for (int64_t m = 0; m < a.num_rows; ++m) std::fill_n(a.y + m * a.y_stride, a.w.cols, 0.0f);
      continue;
    }
    live.push_back(a);
  }
  const auto columns = HWY_DYNAMIC_DISPATCH(MatMulTColumns);
  ForEachUnit<MatMulTArgs>(
      live, pool, [](const MatMulTArgs& a) { return a.w.cols; },
      [](const MatMulTArgs& a) { return ColumnGrain(a.w); },
      [&](const MatMulTArgs& a, int64_t b, int64_t e) { columns(a, b, e); });
}

void MatMulT(const MatMulTArgs& args, ThreadPool& pool) { MatMulTBatch({&args, 1}, pool); }

}  // namespace epserve::kernels
#endif  // HWY_ONCE
