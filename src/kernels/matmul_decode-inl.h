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

constexpr int kDecodeMaxRows = 8;
static_assert(kFp8BlockSize % (2 * HWY_MAX_BYTES / sizeof(float)) == 0,
              "a step never straddles an FP8 block");

// FP8 folds the block scale into the accumulation for every row count: each output sums the
// unscaled products of one 128-wide block, then adds that sum times the block's scale. This is
// one FMA per block and output instead of one multiply per weight vector, and, above all, the
// same order of operations for any number of x rows (decode M = 1..8 and the panel kernel of
// matmul_panel-inl.h, which repeats this arithmetic for more rows), so a
// token's result does not depend on how many other tokens share the call (expert parallelism
// changes that number).
template <DType kDType>
constexpr bool kFoldScale = kDType == DType::kF8E4M3;

// Folded totals live in registers for up to 4 rows of x (2 with 16 vector registers) and in an
// L1 array beyond (a load, FMA and store per output and 128-wide block).
constexpr int kFoldInRegistersMaxRows = kVecRegs == 32 ? 4 : 2;

// Weight rows per tile for kM activation rows: kM * kR accumulators (twice that when FP8 totals
// are held in registers), 2 * kR weights, kR scales and one activation vector must fit in the
// register file.
constexpr int DecodeRowTile(int m) {
  const int acc_per_row = m <= kFoldInRegistersMaxRows ? 2 * m : m;
  for (int r = 4; r > 1; --r)
    if (acc_per_row * r + 3 * r + 1 <= kVecRegs) return r;
  return 1;
}

// Activation rows with the last K % Lanes columns, zero-padded to a full vector.
struct DecodeXTail {
  alignas(64) float v[kDecodeMaxRows][HWY_MAX_BYTES / sizeof(float)];
};

// Software prefetch runs this many bytes (at least one tile) ahead of the rows being read:
// short rows (K = 512 FP8 is 2 KB per 4-row tile) would otherwise prefetch less than a DRAM
// latency ahead.
constexpr int64_t kPrefetchAheadBytes = 8 << 10;
HWY_INLINE int64_t PrefetchRowsAhead(int64_t tile_rows, int64_t row_bytes) {
  return std::max<int64_t>(tile_rows, (kPrefetchAheadBytes + row_bytes - 1) / row_bytes);
}

template <DType kDType, int kM, int kR, class DF>
HWY_INLINE void DecodeTile(DF df, const MatMulArgs& a, const DecodeXTail& xt, int64_t n0) {
  using V = hn::Vec<DF>;
  constexpr bool kFold = kFoldScale<kDType>;
  constexpr bool kTotalsInRegisters = kM <= kFoldInRegistersMaxRows;
  constexpr size_t kElem = kDType == DType::kF32 ? 4 : kDType == DType::kBF16 ? 2 : 1;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t K = a.w.cols;
  WeightRow rows[kR];
  const uint8_t* next[kR];  // the same columns of the next tile's rows, prefetched as we go
  for (int r = 0; r < kR; ++r) {
    rows[r] = RowOf(a.w, n0 + r);
    next[r] =
        static_cast<const uint8_t*>(rows[r].data) +
        std::min<int64_t>(PrefetchRowsAhead(kR, K * kElem), a.w.rows - 1 - n0 - r) * K * kElem;
  }
  V acc[kM][kR];
  V total_reg[kTotalsInRegisters ? kM : 1][kTotalsInRegisters ? kR : 1];
  HWY_ALIGN_MAX float total_mem[kTotalsInRegisters ? 1 : kM * kR * HWY_MAX_BYTES / sizeof(float)];
  HWY_UNROLL(8)
  for (int m = 0; m < kM; ++m) {
    HWY_UNROLL(4)
    for (int r = 0; r < kR; ++r) {
      acc[m][r] = hn::Zero(df);
      if constexpr (kFold) {
        if constexpr (kTotalsInRegisters) {
          total_reg[m][r] = hn::Zero(df);
        } else {
          hn::Store(hn::Zero(df), df, total_mem + (m * kR + r) * N);
        }
      }
    }
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
  auto load2 = [&](int r, int64_t k, V& lo, V& hi) HWY_ATTR {
    // One prefetch per 64-byte line (FP8 steps are 32 bytes).
    if (kElem != 1 || (k & 32) == 0) hwy::Prefetch(next[r] + k * kElem);
    LoadWeight2<kDType>(df, rows[r].data, k, lo, hi);
  };
  auto load1 = [&](int r, int64_t k) HWY_ATTR { return LoadWeight<kDType>(df, rows[r].data, k); };
  auto load_tail = [&](int r, int64_t k, int64_t count)
                       HWY_ATTR { return LoadWeightTail<kDType>(df, rows[r].data, k, count); };
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
        load2(r, k, lo[r], hi[r]);
        lo[r] = scaled(lo[r], r);
        hi[r] = scaled(hi[r], r);
      }
      fma_step(lo, k);
      fma_step(hi, k + N);
    }
    for (; k + N <= k_end; k += N) {
      V w[kR];
      HWY_UNROLL(4)
      for (int r = 0; r < kR; ++r) w[r] = scaled(load1(r, k), r);
      fma_step(w, k);
    }
    if (k < k_end) {  // the last K % N columns: zero-padded weights and x
      V w[kR];
      HWY_UNROLL(4)
      for (int r = 0; r < kR; ++r) w[r] = scaled(load_tail(r, k, k_end - k), r);
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
          if constexpr (kTotalsInRegisters) {
            total_reg[m][r] = hn::MulAdd(acc[m][r], s[r], total_reg[m][r]);
          } else {
            float* t = total_mem + (m * kR + r) * N;
            hn::Store(hn::MulAdd(acc[m][r], s[r], hn::Load(df, t)), df, t);
          }
          acc[m][r] = hn::Zero(df);
        }
      }
    }
  }
  HWY_UNROLL(8)
  for (int m = 0; m < kM; ++m) {
    HWY_UNROLL(4)
    for (int r = 0; r < kR; ++r) {
      V sum = acc[m][r];
      if constexpr (kFold) {
        if constexpr (kTotalsInRegisters) {
          sum = total_reg[m][r];
        } else {
          sum = hn::Load(df, total_mem + (m * kR + r) * N);
        }
      }
      const float v = ReduceSumF(df, sum);
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
