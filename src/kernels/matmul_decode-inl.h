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
static_assert(kFp8BlockSize % (2 * HWY_MAX_BYTES / sizeof(float)) == 0,
              "a step never straddles an FP8 block");

// Weight rows per tile for kM activation rows: kM * kR accumulators (twice that when FP8
// scales are folded, kM <= 2), 2 * kR weights, kR scales and one activation vector must fit in
// the register file.
constexpr int DecodeRowTile(int m) {
  const int acc_per_row = m <= 2 ? 2 * m : m;
  for (int r = 4; r > 1; --r)
    if (acc_per_row * r + 3 * r + 1 <= kVecRegs) return r;
  return 1;
}

// Activation rows with the last K % Lanes columns, zero-padded to a full vector.
struct DecodeXTail {
  alignas(64) float v[kDecodeMaxRows][HWY_MAX_BYTES / sizeof(float)];
};

// FP8 with few rows of x folds the block scale into the accumulation (one FMA per block and
// output instead of one multiply per weight vector); with more rows, scaling the weights is
// cheaper. Either way the order of operations per output is fixed.
template <DType kDType, int kM>
constexpr bool kFoldScale = kDType == DType::kF8E4M3&& kM <= 2;

template <DType kDType, int kM, int kR, class DF>
HWY_INLINE void DecodeTile(DF df, const MatMulArgs& a, const DecodeXTail& xt, int64_t n0) {
  using V = hn::Vec<DF>;
  constexpr bool kFold = kFoldScale<kDType, kM>;
  constexpr size_t kElem = kDType == DType::kF32 ? 4 : kDType == DType::kBF16 ? 2 : 1;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t K = a.w.cols;
  WeightRow rows[kR];
  const uint8_t* next[kR];  // the same columns of the next tile's rows, prefetched as we go
  for (int r = 0; r < kR; ++r) {
    rows[r] = RowOf(a.w, n0 + r);
    next[r] = static_cast<const uint8_t*>(rows[r].data) +
              std::min<int64_t>(kR, a.w.rows - 1 - n0 - r) * K * kElem;
  }
  V acc[kM][kR], total[kM][kR];
  HWY_UNROLL(8)
  for (int m = 0; m < kM; ++m) {
    HWY_UNROLL(4)
    for (int r = 0; r < kR; ++r) acc[m][r] = total[m][r] = hn::Zero(df);
  }
  // Every loop over m and r is fully unrolled so the accumulators stay in registers.
  V s[kR];
  // Multiplies weight vectors w[r] (+ offset into x) into the accumulators.
  auto fma_step = [&](const V* w, int64_t k) HWY_ATTR {
    HWY_UNROLL(8)
    for (int m = 0; m < kM; ++m) {
      const V xv = hn::LoadU(df, a.x + m * a.x_stride + k);
      HWY_UNROLL(4)
      for (int r = 0; r < kR; ++r) acc[m][r] = hn::MulAdd(xv, w[r], acc[m][r]);
    }
  };
  auto scaled = [&](V w, int r) HWY_ATTR {
    if constexpr (kDType == DType::kF8E4M3 && !kFold) return hn::Mul(w, s[r]);
    (void)r;
    return w;
  };
  for (int64_t k0 = 0; k0 < K; k0 += kFp8BlockSize) {
    const int64_t k_end = std::min(K, k0 + kFp8BlockSize);
    if constexpr (kDType == DType::kF8E4M3) {
      HWY_UNROLL(4)
      for (int r = 0; r < kR; ++r)
        s[r] = hn::Set(df, LoadScale<kDType>(rows[r], k0 / kFp8BlockSize));
    }
    int64_t k = k0;
    for (; k + 2 * N <= k_end; k += 2 * N) {  // two vectors per row and step
      V lo[kR], hi[kR];
      HWY_UNROLL(4)
      for (int r = 0; r < kR; ++r) {
        hwy::Prefetch(next[r] + k * kElem);
        LoadWeight2<kDType>(df, rows[r].data, k, lo[r], hi[r]);
        lo[r] = scaled(lo[r], r);
        hi[r] = scaled(hi[r], r);
      }
      fma_step(lo, k);
      fma_step(hi, k + N);
    }
    for (; k + N <= k_end; k += N) {
      V w[kR];
      HWY_UNROLL(4)
      for (int r = 0; r < kR; ++r) w[r] = scaled(LoadWeight<kDType>(df, rows[r].data, k), r);
      fma_step(w, k);
    }
    if (k < k_end) {  // the last K % N columns: zero-padded weights and x
      V w[kR];
      HWY_UNROLL(4)
      for (int r = 0; r < kR; ++r)
        w[r] = scaled(LoadWeightTail<kDType>(df, rows[r].data, k, k_end - k), r);
      HWY_UNROLL(8)
      for (int m = 0; m < kM; ++m) {
        const V xv = hn::Load(df, xt.v[m]);
        HWY_UNROLL(4)
        for (int r = 0; r < kR; ++r) acc[m][r] = hn::MulAdd(xv, w[r], acc[m][r]);
      }
    }
    if constexpr (kFold) {
      HWY_UNROLL(8)
      for (int m = 0; m < kM; ++m) {
        HWY_UNROLL(4)
        for (int r = 0; r < kR; ++r) {
          total[m][r] = hn::MulAdd(acc[m][r], s[r], total[m][r]);
          acc[m][r] = hn::Zero(df);
        }
      }
    }
  }
  HWY_UNROLL(8)
  for (int m = 0; m < kM; ++m) {
    HWY_UNROLL(4)
    for (int r = 0; r < kR; ++r) {
      const float v = ReduceSumF(df, kFold ? total[m][r] : acc[m][r]);
      float* y = a.y + m * a.y_stride + n0 + r;
      *y = a.accumulate ? *y + v : v;
    }
  }
}

// Activation rows copied to vector-aligned storage when they fit: unaligned full-width loads
// straddle cache lines and halve the throughput once x loads dominate (3+ rows).
constexpr int64_t kAlignedXFloats = 16 * 1024;        // 64 KB of stack (grouped MLP)
constexpr int64_t kDecodeAlignedXFloats = 64 * 1024;  // 256 KB of stack: 8 rows of K = 8192

template <DType kDType, int kM, class DF>
HWY_NOINLINE void DecodeRowsM(DF df, const MatMulArgs& args, int64_t n_begin, int64_t n_end) {
  constexpr int kR = DecodeRowTile(kM);
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t K = args.w.cols;
  MatMulArgs a = args;
  HWY_ALIGN_MAX float x_aligned[kM >= 3 ? kDecodeAlignedXFloats : 1];
  const int64_t stride = (K + N - 1) / N * N;
  const bool aligned = reinterpret_cast<uintptr_t>(a.x) % HWY_MAX_BYTES == 0 &&
                       (a.x_stride * sizeof(float)) % HWY_MAX_BYTES == 0;
  if (kM >= 3 && kM * stride <= kDecodeAlignedXFloats && !aligned) {
    for (int m = 0; m < kM; ++m)
      std::memcpy(x_aligned + m * stride, a.x + m * a.x_stride, K * sizeof(float));
    a.x = x_aligned;
    a.x_stride = stride;
  }
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
    case 1:
      return DecodeRowsM<kDType, 1>(df, a, n_begin, n_end);
    case 2:
      return DecodeRowsM<kDType, 2>(df, a, n_begin, n_end);
    case 3:
      return DecodeRowsM<kDType, 3>(df, a, n_begin, n_end);
    case 4:
      return DecodeRowsM<kDType, 4>(df, a, n_begin, n_end);
    case 5:
      return DecodeRowsM<kDType, 5>(df, a, n_begin, n_end);
    case 6:
      return DecodeRowsM<kDType, 6>(df, a, n_begin, n_end);
    case 7:
      return DecodeRowsM<kDType, 7>(df, a, n_begin, n_end);
    default:
      return DecodeRowsM<kDType, 8>(df, a, n_begin, n_end);
  }
}

}  // namespace epserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // EPSERVE_KERNELS_MATMUL_DECODE_INL_H_ toggle
