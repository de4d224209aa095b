// Per-target decode matmul: y[m, n] = x[m, :] . W[n, :] for few activation rows (M <= 8),
// streaming every weight row exactly once with dequantization fused into the loads.
// A tile of kR weight rows is read in lock-step (kR streams) and multiplied with all kM rows
// of x, which stay in L1/L2. Each output is one chain of FMAs over K in a fixed order followed
// by a fixed lane reduction, independent of which tile or thread computes it: results are
// bit-identical for any split of the rows.

#if defined(EPSERVE_KERNELS_MATMUL_DECODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef EPSERVE_KERNELS_MATMUL_DECODE_INL_H_
#undef EPSERVE_KERNELS_MATMUL_DECODE_INL_H_
#else
#define EPSERVE_KERNELS_MATMUL_DECODE_INL_H_
#endif

#include <algorithm>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/matmul.h"
#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace epserve::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Vector registers of the target (x86 AVX-512 and Arm have 32, the rest 16).
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_ARCH_ARM
constexpr int kVecRegs = 32;
#else
constexpr int kVecRegs = 16;
#endif

constexpr int kDecodeMaxRows = 8;
static_assert(kFp8BlockSize % (HWY_MAX_BYTES / sizeof(float)) == 0, "a vector never straddles an FP8 block");

// Weight rows per tile for kM activation rows: kM * kR accumulators, kR weights, kR scales and
// one activation vector must fit in the register file.
constexpr int DecodeRowTile(int m) {
  for (int r = 4; r > 1; --r)
    if (m * r + 2 * r + 1 <= kVecRegs - 1) return r;
  return 1;
}

// Activation rows with the last K % Lanes columns, zero-padded to a full vector.
struct DecodeXTail {
  alignas(64) float v[kDecodeMaxRows][HWY_MAX_BYTES / sizeof(float)];
};

template <DType kDType, int kM, int kR, class DF>
HWY_INLINE void DecodeTile(DF df, const MatMulArgs& a, const DecodeXTail& xt, int64_t n0) {
  using V = hn::Vec<DF>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t K = a.w.cols;
  const int64_t k_full = K - K % N;
  WeightRow rows[kR];
  for (int r = 0; r < kR; ++r) rows[r] = RowOf(a.w, n0 + r);
  V acc[kM][kR];
  HWY_UNROLL(8)
  for (int m = 0; m < kM; ++m) {
    HWY_UNROLL(4)
    for (int r = 0; r < kR; ++r) acc[m][r] = hn::Zero(df);
  }
  // Every loop over m and r is fully unrolled so the accumulators stay in registers.
  V s[kR];
  for (int64_t k0 = 0; k0 < k_full; k0 += kFp8BlockSize) {
    const int64_t k_end = std::min(k_full, k0 + kFp8BlockSize);
    if constexpr (kDType == DType::kF8E4M3) {
      HWY_UNROLL(4)
      for (int r = 0; r < kR; ++r) s[r] = hn::Set(df, LoadScale<kDType>(rows[r], k0 / kFp8BlockSize));
    }
    for (int64_t k = k0; k < k_end; k += N) {
      V w[kR];
      HWY_UNROLL(4)
      for (int r = 0; r < kR; ++r) {
        w[r] = LoadWeight<kDType>(df, rows[r].data, k);
        if constexpr (kDType == DType::kF8E4M3) w[r] = hn::Mul(w[r], s[r]);
      }
      HWY_UNROLL(8)
      for (int m = 0; m < kM; ++m) {
        const V xv = hn::LoadU(df, a.x + m * a.x_stride + k);
        HWY_UNROLL(4)
        for (int r = 0; r < kR; ++r) acc[m][r] = hn::MulAdd(xv, w[r], acc[m][r]);
      }
    }
  }
  if (k_full < K) {  // the last K % N columns (N divides the FP8 block, so one block)
    V w[kR];
    HWY_UNROLL(4)
    for (int r = 0; r < kR; ++r) {
      w[r] = LoadWeightTail<kDType>(df, rows[r].data, k_full, K - k_full);
      if constexpr (kDType == DType::kF8E4M3)
        w[r] = hn::Mul(w[r], hn::Set(df, LoadScale<kDType>(rows[r], k_full / kFp8BlockSize)));
    }
    HWY_UNROLL(8)
    for (int m = 0; m < kM; ++m) {
      const V xv = hn::Load(df, xt.v[m]);
      HWY_UNROLL(4)
      for (int r = 0; r < kR; ++r) acc[m][r] = hn::MulAdd(xv, w[r], acc[m][r]);
    }
  }
  HWY_UNROLL(8)
  for (int m = 0; m < kM; ++m) {
    HWY_UNROLL(4)
    for (int r = 0; r < kR; ++r) {
      const float v = ReduceSumF(df, acc[m][r]);
      float* y = a.y + m * a.y_stride + n0 + r;
      *y = a.accumulate ? *y + v : v;
    }
  }
}

template <DType kDType, int kM, class DF>
HWY_NOINLINE void DecodeRowsM(DF df, const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  constexpr int kR = DecodeRowTile(kM);
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t K = a.w.cols;
  DecodeXTail xt;
  const int64_t k_full = K - K % N;
  for (int m = 0; m < kM; ++m) {
    hn::Store(hn::Zero(df), df, xt.v[m]);
    std::memcpy(xt.v[m], a.x + m * a.x_stride + k_full, (K - k_full) * sizeof(float));
  }
  int64_t n = n_begin;
  for (; n + kR <= n_end; n += kR) DecodeTile<kDType, kM, kR>(df, a, xt, n);
  for (; n < n_end; ++n) DecodeTile<kDType, kM, 1>(df, a, xt, n);
}

// Rows [n_begin, n_end) of y for a.num_rows in 1..kDecodeMaxRows (strides resolved).
template <DType kDType>
HWY_INLINE void DecodeRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  const hn::ScalableTag<float> df;
  switch (a.num_rows) {
    case 1: return DecodeRowsM<kDType, 1>(df, a, n_begin, n_end);
    case 2: return DecodeRowsM<kDType, 2>(df, a, n_begin, n_end);
    case 3: return DecodeRowsM<kDType, 3>(df, a, n_begin, n_end);
    case 4: return DecodeRowsM<kDType, 4>(df, a, n_begin, n_end);
    case 5: return DecodeRowsM<kDType, 5>(df, a, n_begin, n_end);
    case 6: return DecodeRowsM<kDType, 6>(df, a, n_begin, n_end);
    case 7: return DecodeRowsM<kDType, 7>(df, a, n_begin, n_end);
    default: return DecodeRowsM<kDType, 8>(df, a, n_begin, n_end);
  }
}

}  // namespace epserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // EPSERVE_KERNELS_MATMUL_DECODE_INL_H_ toggle
