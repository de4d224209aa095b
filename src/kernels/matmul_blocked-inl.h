// Per-target cache-blocked matmul for more than 8 activation rows (decode batches, prefill):
// y = x W^T with every output computed by exactly the arithmetic of the streaming kernel for
// M <= 8 (DecodeTile, matmul_decode-inl.h): one vector accumulator per output chained over K in
// Lanes-wide steps in order (the K % Lanes tail zero-padded), for FP8 the unscaled products of
// each 128-wide block folded into a vector total with the block's scale, then one lane
// reduction. A row's result thus depends neither on M nor on the tiling or the thread split,
// so it does not change with how many other tokens share the call (batch size and composition,
// the rows an expert-parallel rank receives): greedy engine output is batch invariant and an
// expert-parallel run reproduces one process bit for bit. The classic outer-product kernel (x
// broadcast against k-major packed weights) is faster for prefill on 16-register targets, but
// it sums each output as one scalar chain over K, which no streaming M <= 8 kernel matches.
//
// Blocking: for kBlockN weight rows and a chunk of kChunkM rows of x, K is walked in kBlockK
// blocks; each weight block is converted once per chunk (as LoadWeight returns it) into an
// L2-resident panel, and each tile of kTileM x rows (in L1) is multiplied with all of it by
// register tiles of kTileM x kTileR weight rows. Tiles carry their vector accumulators (FP8:
// totals) from one K block to the next through an array on the stack, which is exact.

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
#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace epserve::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// kTileM x kTileR accumulators, kTileM x vectors and one weight vector fill the registers.
constexpr int kTileM = kVecRegs == 32 ? 4 : 3;
constexpr int kTileR = kVecRegs == 32 ? 6 : 4;
constexpr int64_t kBlockK = 512;  // a multiple of the FP8 block and of every vector length
constexpr int64_t kBlockN = 8 * kTileR;
constexpr int64_t kChunkM = (kVecRegs == 32 ? 8 : 16) * kTileM;
constexpr int64_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);
static_assert(kBlockK % kFp8BlockSize == 0, "a K block holds whole FP8 blocks");

// One K block of a (weight block, x chunk) pair.
struct PanelBlock {
  const float* panel = nullptr;  // [kBlockN][kBlockK]: W[n0 + r, k0 + k] as LoadWeight returns it
  int64_t n0 = 0, k0 = 0, kc = 0;
  int64_t m0 = 0;          // first x row of the chunk
  float* carry = nullptr;  // [kChunkM][kBlockN][lanes]: accumulators (FP8: totals) so far
};

// y[m0 : m0 + kM, n : n + kR] after this K block (written after the last one).
template <DType kDType, int kM, int kR, class DF>
HWY_INLINE void PanelTile(DF df, const MatMulArgs& a, const PanelBlock& b, int64_t m0, int64_t n) {
  using V = hn::Vec<DF>;
  constexpr bool kFold = kFoldScale<kDType>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t K = a.w.cols, k_stop = b.k0 + b.kc;
  const bool first = b.k0 == 0, last = k_stop == K;
  const float* x = a.x + m0 * a.x_stride;
  const float* w = b.panel + (n - b.n0) * kBlockK;  // w[r * kBlockK + k - k0]: W[n + r, k]
  auto carried = [&](int m, int r) {
    return b.carry + ((m0 - b.m0 + m) * kBlockN + (n - b.n0 + r)) * N;
  };
  WeightRow rows[kR];
  for (int r = 0; r < kR; ++r) rows[r] = RowOf(a.w, n + r);
  // The last K % N columns of x, zero-padded (DecodeXTail).
  const int64_t k_full = K - K % N;
  HWY_ALIGN_MAX float xt[kM][kMaxLanes];
  for (int m = 0; m < kM; ++m) {
    hn::Store(hn::Zero(df), df, xt[m]);
    if (last) std::memcpy(xt[m], x + m * a.x_stride + k_full, (K - k_full) * sizeof(float));
  }
  V acc[kM][kR];
  HWY_UNROLL(4)
  for (int m = 0; m < kM; ++m) {
    HWY_UNROLL(6)
    for (int r = 0; r < kR; ++r) {
      acc[m][r] = kFold || first ? hn::Zero(df) : hn::Load(df, carried(m, r));
      if (kFold && first) hn::Store(hn::Zero(df), df, carried(m, r));
    }
  }
  for (int64_t k0 = b.k0; k0 < k_stop; k0 += kFp8BlockSize) {
    const int64_t k_end = std::min(k_stop, k0 + kFp8BlockSize);
    int64_t k = k0;
    for (; k + N <= k_end; k += N) {
      V xv[kM];
      HWY_UNROLL(4)
      for (int m = 0; m < kM; ++m) xv[m] = hn::LoadU(df, x + m * a.x_stride + k);
      HWY_UNROLL(6)
      for (int r = 0; r < kR; ++r) {
        const V wv = hn::Load(df, w + r * kBlockK + (k - b.k0));
        HWY_UNROLL(4)
        for (int m = 0; m < kM; ++m) acc[m][r] = hn::MulAdd(xv[m], wv, acc[m][r]);
      }
    }
    if (k < k_end) {  // the last K % N columns
      V xv[kM];
      HWY_UNROLL(4)
      for (int m = 0; m < kM; ++m) xv[m] = hn::Load(df, xt[m]);
      HWY_UNROLL(6)
      for (int r = 0; r < kR; ++r) {
        const V wv = LoadWeightTail<DType::kF32>(df, w + r * kBlockK, k - b.k0, k_end - k);
        HWY_UNROLL(4)
        for (int m = 0; m < kM; ++m) acc[m][r] = hn::MulAdd(xv[m], wv, acc[m][r]);
      }
    }
    if constexpr (kFold) {
      HWY_UNROLL(6)
      for (int r = 0; r < kR; ++r) {
        const V s = hn::Set(df, LoadScale<kDType>(rows[r], k0 / kFp8BlockSize));
        HWY_UNROLL(4)
        for (int m = 0; m < kM; ++m) {
          float* t = carried(m, r);
          hn::Store(hn::MulAdd(acc[m][r], s, hn::Load(df, t)), df, t);
          acc[m][r] = hn::Zero(df);
        }
      }
    }
  }
  HWY_UNROLL(4)
  for (int m = 0; m < kM; ++m) {
    HWY_UNROLL(6)
    for (int r = 0; r < kR; ++r) {
      if (!last) {
        if constexpr (!kFold) hn::Store(acc[m][r], df, carried(m, r));
        continue;
      }
      const V sum = kFold ? hn::Load(df, carried(m, r)) : acc[m][r];
      const float v = ReduceSumF(df, sum);
      float* y = a.y + (m0 + m) * a.y_stride + n + r;
      *y = a.accumulate ? *y + v : v;
    }
  }
}

// Tiles of kM x rows at m over the block's nb weight rows (x in L1, the panel in L1/L2).
template <DType kDType, int kM, class DF>
HWY_NOINLINE void PanelRow(DF df, const MatMulArgs& a, const PanelBlock& b, int64_t nb, int64_t m) {
  int64_t n = b.n0;
  for (; n + kTileR <= b.n0 + nb; n += kTileR) PanelTile<kDType, kM, kTileR>(df, a, b, m, n);
  for (; n < b.n0 + nb; ++n) PanelTile<kDType, kM, 1>(df, a, b, m, n);
}

// Rows [n_begin, n_end) of y = x W^T for any number of x rows (strides resolved).
template <DType kDType>
HWY_NOINLINE void BlockedRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  static_assert(kTileM <= 4, "BlockedRows dispatches tiles of up to 4 rows");
  const hn::ScalableTag<float> df;
  const int64_t K = a.w.cols, M = a.num_rows;
  HWY_ALIGN_MAX float panel[kBlockN * kBlockK];
  HWY_ALIGN_MAX float carry[kChunkM * kBlockN * kMaxLanes];
  for (int64_t n0 = n_begin; n0 < n_end; n0 += kBlockN) {
    const int64_t nb = std::min(kBlockN, n_end - n0);
    for (int64_t m0 = 0; m0 < M; m0 += kChunkM) {
      const int64_t m_end = std::min(M, m0 + kChunkM);
      for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
        const int64_t kc = std::min(kBlockK, K - k0);
        for (int64_t r = 0; r < nb; ++r)
          ConvertSpanUnscaled<kDType>(df, a.w, n0 + r, kc, panel + r * kBlockK, k0);
        const PanelBlock b{.panel = panel, .n0 = n0, .k0 = k0, .kc = kc, .m0 = m0, .carry = carry};
        for (int64_t m = m0; m < m_end; m += kTileM) {
          switch (std::min<int64_t>(kTileM, m_end - m)) {
            case 1:
              PanelRow<kDType, 1>(df, a, b, nb, m);
              break;
            case 2:
              PanelRow<kDType, 2>(df, a, b, nb, m);
              break;
            case 3:
              PanelRow<kDType, 3>(df, a, b, nb, m);
              break;
            default:
              if constexpr (kTileM > 3) PanelRow<kDType, 4>(df, a, b, nb, m);
              break;
          }
        }
      }
    }
  }
}

// Rows [n_begin, n_end) of y = x W^T: the streaming kernel for few rows, else the blocked one;
// both give every output the same bits.
template <DType kDType>
HWY_INLINE void GemmRowsT(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.num_rows <= kDecodeMaxRows) {
    DecodeRows<kDType>(a, n_begin, n_end);
  } else {
    BlockedRows<kDType>(a, n_begin, n_end);
  }
}

HWY_INLINE void GemmRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  switch (a.w.dtype) {
    case DType::kF32:
      return GemmRowsT<DType::kF32>(a, n_begin, n_end);
    case DType::kBF16:
      return GemmRowsT<DType::kBF16>(a, n_begin, n_end);
    case DType::kF8E4M3:
      return GemmRowsT<DType::kF8E4M3>(a, n_begin, n_end);
  }
}

}  // namespace epserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // EPSERVE_KERNELS_MATMUL_BLOCKED_INL_H_ toggle
