// Per-target cache-blocked matmul for many activation rows (prefill): y = x W^T.
// The weight block W[n0 : n0 + kBlockN, k0 : k0 + kBlockK] is dequantized once into a packed
// float panel (k-major, 2 vectors of n per k, on the stack: L2-resident) and then multiplied
// with every row of x by a register-blocked micro-kernel (kMr rows x 2 vectors, x broadcast).
// Each output is, per K block, one FMA chain over the block added to y, in an order that does
// not depend on the tile or thread computing it: results are bit-identical for any row split.

#if defined(EPSERVE_KERNELS_MATMUL_BLOCKED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef EPSERVE_KERNELS_MATMUL_BLOCKED_INL_H_
#undef EPSERVE_KERNELS_MATMUL_BLOCKED_INL_H_
#else
#define EPSERVE_KERNELS_MATMUL_BLOCKED_INL_H_
#endif

#include <algorithm>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/matmul.h"
#include "kernels/matmul_decode-inl.h"
#include "kernels/matmul_fast.h"
#include "kernels/matmul_i8.h"
#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace epserve::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int64_t kBlockK = 256;  // multiple of the FP8 block (128)
constexpr int64_t kBlockN = 128;  // weight rows per packed block
constexpr int kMr = kVecRegs == 32 ? 12 : 6;

// Packs W[n0 : n0 + nc, k0 : k0 + kc] (real values) as panels of nr = 2 * Lanes columns:
// bp[(p * kBlockK + k) * nr + j] = W[n0 + p * nr + j, k0 + k]; rows past nc are zero.
template <DType kDType, class DF>
HWY_INLINE void PackWeights(DF df, const WeightView& w, int64_t n0, int64_t nc, int64_t k0,
                            int64_t kc, float* HWY_RESTRICT bp) {
  const int64_t nr = 2 * static_cast<int64_t>(hn::Lanes(df));
  const int64_t kc4 = (kc + 3) & ~int64_t{3};
  const int64_t nc_padded = (nc + nr - 1) / nr * nr;
  alignas(64) float rows[4][kBlockK + 4];
  for (int64_t n = 0; n < nc_padded; n += 4) {
    for (int r = 0; r < 4; ++r) {
      if (n + r < nc) {
        DequantizeSpan<kDType>(df, w, n0 + n + r, k0, kc, rows[r]);
        for (int64_t k = kc; k < kc4; ++k) rows[r][k] = 0.0f;
      } else {
        std::fill_n(rows[r], kc4, 0.0f);
      }
    }
#if HWY_TARGET == HWY_SCALAR  // single-lane vectors: panels are narrower than 4 rows
    for (int r = 0; r < 4 && n + r < nc_padded; ++r) {
      float* dst = bp + (n + r) / nr * kBlockK * nr + (n + r) % nr;
      for (int64_t k = 0; k < kc4; ++k) dst[k * nr] = rows[r][k];
    }
#else
    float* dst = bp + n / nr * kBlockK * nr + n % nr;
    const hn::Full128<float> d4;
    for (int64_t k = 0; k < kc4; k += 4) {
      // 4x4 transpose: four rows' k..k+3 become four k's n..n+3.
      const auto r0 = hn::Load(d4, rows[0] + k), r1 = hn::Load(d4, rows[1] + k);
      const auto r2 = hn::Load(d4, rows[2] + k), r3 = hn::Load(d4, rows[3] + k);
      const auto t0 = hn::InterleaveLower(d4, r0, r1), t1 = hn::InterleaveLower(d4, r2, r3);
      const auto t2 = hn::InterleaveUpper(d4, r0, r1), t3 = hn::InterleaveUpper(d4, r2, r3);
      hn::Store(hn::ConcatLowerLower(d4, t1, t0), d4, dst + (k + 0) * nr);
      hn::Store(hn::ConcatUpperUpper(d4, t1, t0), d4, dst + (k + 1) * nr);
      hn::Store(hn::ConcatLowerLower(d4, t3, t2), d4, dst + (k + 2) * nr);
      hn::Store(hn::ConcatUpperUpper(d4, t3, t2), d4, dst + (k + 3) * nr);
    }
#endif
  }
}

// y[0 : kRows, 0 : ncols] (+)= x[0 : kRows, 0 : kc] * panel, the panel being kc x nr.
template <int kRows, class DF>
HWY_INLINE void MicroKernel(DF df, const float* HWY_RESTRICT x, int64_t xs,
                            const float* HWY_RESTRICT panel, int64_t kc, float* y, int64_t ys,
                            int64_t ncols, bool load_c) {
  using V = hn::Vec<DF>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t nr = 2 * N;
  V c0[kRows], c1[kRows];
  HWY_UNROLL(16)
  for (int m = 0; m < kRows; ++m) c0[m] = c1[m] = hn::Zero(df);
  for (int64_t k = 0; k < kc; ++k) {
    const V b0 = hn::Load(df, panel + k * nr);
    const V b1 = hn::Load(df, panel + k * nr + N);
    HWY_UNROLL(16)
    for (int m = 0; m < kRows; ++m) {
      const V a = hn::Set(df, x[m * xs + k]);
      c0[m] = hn::MulAdd(a, b0, c0[m]);
      c1[m] = hn::MulAdd(a, b1, c1[m]);
    }
  }
  if (ncols == nr) {
    for (int m = 0; m < kRows; ++m) {
      float* yr = y + m * ys;
      if (load_c) {
        c0[m] = hn::Add(hn::LoadU(df, yr), c0[m]);
        c1[m] = hn::Add(hn::LoadU(df, yr + N), c1[m]);
      }
      hn::StoreU(c0[m], df, yr);
      hn::StoreU(c1[m], df, yr + N);
    }
    return;
  }
  alignas(64) float tmp[2 * HWY_MAX_BYTES / sizeof(float)];
  for (int m = 0; m < kRows; ++m) {
    hn::Store(c0[m], df, tmp);
    hn::Store(c1[m], df, tmp + N);
    float* yr = y + m * ys;
    for (int64_t j = 0; j < ncols; ++j) yr[j] = load_c ? yr[j] + tmp[j] : tmp[j];
  }
}

template <int kRows, class DF>
HWY_NOINLINE void MultiplyPanels(DF df, const MatMulArgs& a, const float* bp, int64_t m0,
                                 int64_t n0, int64_t nc, int64_t k0, int64_t kc, bool load_c) {
  const int64_t nr = 2 * static_cast<int64_t>(hn::Lanes(df));
  for (int64_t p = 0; p * nr < nc; ++p)
    MicroKernel<kRows>(df, a.x + m0 * a.x_stride + k0, a.x_stride, bp + p * kBlockK * nr, kc,
                       a.y + m0 * a.y_stride + n0 + p * nr, a.y_stride, std::min(nr, nc - p * nr),
                       load_c);
}

template <class DF>
HWY_INLINE void MultiplyPanelsRows(DF df, int rows, const MatMulArgs& a, const float* bp,
                                   int64_t m0, int64_t n0, int64_t nc, int64_t k0, int64_t kc,
                                   bool load_c) {
#define EPSERVE_PANELS_CASE(R) \
  case R:                      \
    return MultiplyPanels<R>(df, a, bp, m0, n0, nc, k0, kc, load_c);
  switch (rows) {
    EPSERVE_PANELS_CASE(1)
    EPSERVE_PANELS_CASE(2)
    EPSERVE_PANELS_CASE(3)
    EPSERVE_PANELS_CASE(4)
    EPSERVE_PANELS_CASE(5)
    EPSERVE_PANELS_CASE(6)
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_ARCH_ARM
    EPSERVE_PANELS_CASE(7)
    EPSERVE_PANELS_CASE(8)
    EPSERVE_PANELS_CASE(9)
    EPSERVE_PANELS_CASE(10)
    EPSERVE_PANELS_CASE(11)
    EPSERVE_PANELS_CASE(12)
#endif
    default:
      break;
  }
#undef EPSERVE_PANELS_CASE
}

// Rows [n_begin, n_end) of y = x W^T for any number of x rows (strides resolved).
template <DType kDType>
HWY_INLINE void BlockedRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  static_assert(kMr <= 12, "MultiplyPanelsRows covers up to 12 rows");
  const hn::ScalableTag<float> df;
  const int64_t K = a.w.cols, M = a.num_rows;
  HWY_ALIGN_MAX float bp[kBlockK * (kBlockN + 2 * HWY_MAX_BYTES / sizeof(float))];
  for (int64_t n0 = n_begin; n0 < n_end; n0 += kBlockN) {
    const int64_t nc = std::min(kBlockN, n_end - n0);
    for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
      const int64_t kc = std::min(kBlockK, K - k0);
      PackWeights<kDType>(df, a.w, n0, nc, k0, kc, bp);
      const bool load_c = k0 > 0 || a.accumulate;
      for (int64_t m0 = 0; m0 < M; m0 += kMr)
        MultiplyPanelsRows(df, static_cast<int>(std::min<int64_t>(kMr, M - m0)), a, bp, m0, n0, nc,
                           k0, kc, load_c);
    }
  }
}

// Medium row counts (a decode batch): packing for the blocked kernel would cost as much as the
// multiply, so a panel of weight rows (up to kMidPanelFloats, L2-resident) is converted once
// and the streaming kernel runs over it for each block of x rows (8, or 4 for FP8), which
// stays in L1 while the panel's rows stream past it (x copied to aligned storage once).
constexpr int64_t kMidMaxK = 4096;
constexpr int64_t kMidMaxXFloats = 32 * 1024;   // 128 KB
constexpr int64_t kMidPanelFloats = 64 * 1024;  // 256 KB

HWY_INLINE bool UseMidRows(const MatMulArgs& a) {
  const int64_t stride = (a.w.cols + 15) / 16 * 16;
  return a.num_rows > kDecodeMaxRows && a.w.cols <= kMidMaxK &&
         a.num_rows * stride <= kMidMaxXFloats;
}

template <DType kDType>
HWY_NOINLINE void MidRows(const MatMulArgs& args, int64_t n_begin, int64_t n_end) {
  const hn::ScalableTag<float> df;
  const int64_t K = args.w.cols, M = args.num_rows;
  MatMulArgs a = args;
  HWY_ALIGN_MAX float x_aligned[kMidMaxXFloats];
  const int64_t stride = (K + 15) / 16 * 16;  // a multiple of every x86 vector length
  const bool aligned = reinterpret_cast<uintptr_t>(a.x) % HWY_MAX_BYTES == 0 &&
                       (a.x_stride * sizeof(float)) % HWY_MAX_BYTES == 0;
  if (!aligned) {  // callers with 64-byte aligned rows (AlignedVector) skip the copy
    for (int64_t m = 0; m < M; ++m)
      std::memcpy(x_aligned + m * stride, a.x + m * a.x_stride, K * sizeof(float));
    a.x = x_aligned;
    a.x_stride = stride;
  }
  HWY_ALIGN_MAX float w[kMidPanelFloats];
  const int64_t panel_rows = std::max<int64_t>(8, kMidPanelFloats / K / 8 * 8);
  MatMulArgs c = a;
  for (int64_t n0 = n_begin; n0 < n_end; n0 += panel_rows) {
    const int64_t rows = std::min(panel_rows, n_end - n0);
    // Converted as LoadWeight returns them (FP8 without its block scales): the decode kernel
    // then does exactly the arithmetic of streaming the matrix, so M <= 8 and this path agree
    // bit for bit.
    for (int64_t r = 0; r < rows; ++r) ConvertSpanUnscaled<kDType>(df, a.w, n0 + r, K, w + r * K);
    const RawRows raw{.data = w, .row0 = n0};
    // FP8 runs x in blocks of 4 rows (their folded totals in registers with 32 vector
    // registers, in L1 with 16: 4 x 2 accumulator chains instead of 2 x 2 hide the FMA
    // latency better, 15-20% faster on AVX2 at M = 12..32), the others in blocks of 8.
    constexpr int64_t kRowBlock = kFoldScale<kDType> ? 4 : kDecodeMaxRows;
    for (int64_t m0 = 0; m0 < M; m0 += kRowBlock) {
      c.x = a.x + m0 * a.x_stride;
      c.y = a.y + m0 * a.y_stride;
      c.num_rows = std::min<int64_t>(kRowBlock, M - m0);
      DecodeRows<kDType>(c, n0, n0 + rows, raw);
    }
  }
}

// Rows [n_begin, n_end) of y = x W^T: the streaming kernel for few rows, the dequantize-once
// streaming kernel for a decode batch, else the blocked one. The choice depends on the shape
// only, never on the split.
template <DType kDType>
HWY_INLINE void GemmRowsT(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.num_rows <= kDecodeMaxRows) {
    DecodeRows<kDType>(a, n_begin, n_end);
  } else if (UseMidRows(a)) {
    MidRows<kDType>(a, n_begin, n_end);
  } else {
    BlockedRows<kDType>(a, n_begin, n_end);
  }
}

HWY_INLINE void GemmRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.compute == Compute::kFast && FastMatMulAvailable())
    return FastMatMulRows(a, n_begin, n_end);
  switch (a.w.dtype) {
    case DType::kF32:
      return GemmRowsT<DType::kF32>(a, n_begin, n_end);
    case DType::kBF16:
      return GemmRowsT<DType::kBF16>(a, n_begin, n_end);
    case DType::kF8E4M3:
      return GemmRowsT<DType::kF8E4M3>(a, n_begin, n_end);
    case DType::kI8Packed:
      return I8GemmRows(a, n_begin, n_end);
  }
}

}  // namespace epserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // EPSERVE_KERNELS_MATMUL_BLOCKED_INL_H_ toggle
