// Per-target matmul for more than kDecodeMaxRows activation rows (decode batches and prefill):
// y = x W^T with, for every output, exactly the arithmetic of the streaming decode kernel
// (matmul_decode-inl.h): one vector chain of FMAs over K in order (lane j sums the products of
// the columns k = j mod Lanes), FP8 block scales folded per 128-wide block, then ReduceSumF. So a
// row's result does not depend on how many rows share the call (M), nor on the split of weight
// rows over threads: the step's batch, chunked prefill, micro-batches and expert parallelism
// (whose ranks see other row counts per expert) all give a token the bits it gets alone.
//
// A panel of weight rows (up to kPanelFloats, L2-resident) is converted once as LoadWeight
// returns them (FP8 without its block scale), zero-padded to whole vectors, and multiplied with
// blocks of kM rows of x by a register tile of kM x kR vector accumulators (and, for FP8, kM x kR
// vectors of folded block totals, in registers or in L1), each weight vector loaded once per
// block of x rows and each x vector once per tile. Sums over lanes in registers, not one lane per
// output as an outer-product GEMM keeps them, cost a reduction per output and, for FP8, one FMA
// per 128-wide block and output: a prefill-sized product (M >= 256) takes 1.15-1.3x (BF16) and
// 1.2-1.4x (FP8) the time of the outer-product kernel this replaced, which summed in another
// order; decode batches (M = 16-64) take 0.85-1.2x (docs/kernels.md, "Batch invariance").

#if defined(EPSERVE_KERNELS_MATMUL_PANEL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef EPSERVE_KERNELS_MATMUL_PANEL_INL_H_
#undef EPSERVE_KERNELS_MATMUL_PANEL_INL_H_
#else
#define EPSERVE_KERNELS_MATMUL_PANEL_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/fp4.h"
#include "kernels/matmul.h"
#include "kernels/matmul_decode-inl.h"
#include "kernels/matmul_fast.h"
#include "kernels/matmul_i8.h"
#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace epserve::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int64_t kPanelFloats = 64 * 1024;   // 256 KB of converted weight rows
constexpr int64_t kPanelXFloats = 16 * 1024;  // 64 KB: one block of x rows, aligned
constexpr int64_t kPanelScales = 4096;        // FP8 block scales of the panel's rows
// Rows of x longer than kPanelChunkK are multiplied kPanelChunk columns at a time (a multiple
// of the FP8 block), so a block of x rows stays in L1 while the panel's rows stream past it;
// every output's chain then continues from an L1 copy of its accumulator (FP8: of its folded
// total, the accumulator being zero at a block's end), which is exact. The panel then holds at
// most kPanelChunkedRows rows, whose chains fit that copy (so does a panel whose FP8 totals do
// not fit the registers: they live in the same copy).
constexpr int64_t kPanelChunkK = 1024;
constexpr int64_t kPanelChunk = 512;
constexpr int64_t kPanelChunkedRows = 48;

// Register tile: kM rows of x times kR weight rows. FP8 needs a vector of folded totals per
// output besides its accumulator: 4 x 3 keeps both in 32 registers; with 16 registers the totals
// live in L1 (4 x 2). Measured on Zen 5, one thread, M = 256, K = 1024, against other shapes
// of the same register budget.
template <DType kDType>
constexpr int PanelTileRows() {
  if constexpr (kFoldScale<kDType>) return 4;
  return kVecRegs == 32 ? 6 : 8;
}
template <DType kDType>
constexpr int PanelTileWeights() {
  if constexpr (kFoldScale<kDType>) return kVecRegs == 32 ? 3 : 2;
  return kVecRegs == 32 ? 4 : 1;
}
constexpr int64_t kPanelLanes = HWY_MAX_BYTES / sizeof(float);
using PanelTail = float[kPanelLanes];

// The operands of one block of x rows against a panel, over columns [k_begin, k_end).
struct PanelBlock {
  const float* x;  // rows of x, x_stride apart; only full vectors of each row are read
  int64_t x_stride;
  const PanelTail* x_tail;  // per row: its last K % Lanes columns, zero-padded
  const float* w;           // panel rows (LoadWeight values), w_stride apart, zero-padded
  int64_t w_stride;
  const float* scales;  // FP8: scales[r * num_blocks + b] = LoadScale of panel row r, block b
  int64_t num_blocks;
  int64_t k_begin, k_end;  // a multiple of the FP8 block; k_end = K for the last chunk
  bool first, last;        // chunk: chains start from zero / end in y
  float* chains;           // [panel row][kM][kPanelLanes]: the chains between chunks
  float* y;                // y[m * y_stride + r] for panel row r
  int64_t y_stride;
  bool accumulate;
};

// Outputs of kM rows of x and kR panel rows starting at panel row r0, over the block's columns.
template <DType kDType, int kM, int kR, class DF>
HWY_INLINE void PanelTile(DF df, const PanelBlock& b, int64_t r0) {
  using V = hn::Vec<DF>;
  constexpr bool kFold = kFoldScale<kDType>;
  constexpr bool kTotalsInRegisters = 2 * kM * kR + kR + 1 <= kVecRegs;
  constexpr int kTM = kFold && kTotalsInRegisters ? kM : 1;
  constexpr int kTR = kFold && kTotalsInRegisters ? kR : 1;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const float* HWY_RESTRICT w = b.w + r0 * b.w_stride;
  // FP8 totals held in memory live in the chain copies from the start.
  auto chain = [&](int m, int r) { return b.chains + ((r0 + r) * kM + m) * kPanelLanes; };
  V acc[kM][kR];
  V total[kTM][kTR];
  HWY_UNROLL(8)
  for (int m = 0; m < kM; ++m) {
    HWY_UNROLL(8)
    for (int r = 0; r < kR; ++r) {
      if constexpr (kFold) {
        acc[m][r] = hn::Zero(df);
        if constexpr (kTotalsInRegisters) {
          total[m][r] = b.first ? hn::Zero(df) : hn::Load(df, chain(m, r));
        } else if (b.first) {
          hn::Store(hn::Zero(df), df, chain(m, r));
        }
      } else {
        acc[m][r] = b.first ? hn::Zero(df) : hn::Load(df, chain(m, r));
      }
    }
  }
  // One step: Lanes columns from k, every x row against every weight row.
  auto step = [&](int64_t k, bool tail) HWY_ATTR {
    V wv[kR];
    HWY_UNROLL(8)
    for (int r = 0; r < kR; ++r) wv[r] = hn::Load(df, w + r * b.w_stride + k);
    HWY_UNROLL(8)
    for (int m = 0; m < kM; ++m) {
      const V xv = tail ? hn::Load(df, b.x_tail[m]) : hn::LoadU(df, b.x + m * b.x_stride + k);
      HWY_UNROLL(8)
      for (int r = 0; r < kR; ++r) acc[m][r] = hn::MulAdd(xv, wv[r], acc[m][r]);
    }
  };
  for (int64_t k0 = b.k_begin; k0 < b.k_end; k0 += kFp8BlockSize) {
    const int64_t k_end = std::min(b.k_end, k0 + kFp8BlockSize);
    int64_t k = k0;
    for (; k + N <= k_end; k += N) step(k, false);
    if (k < k_end) step(k, true);  // the last K % Lanes columns, zero-padded on both sides
    if constexpr (kFold) {
      HWY_UNROLL(8)
      for (int r = 0; r < kR; ++r) {
        const V s = hn::Set(df, b.scales[(r0 + r) * b.num_blocks + k0 / kFp8BlockSize]);
        HWY_UNROLL(8)
        for (int m = 0; m < kM; ++m) {
          if constexpr (kTotalsInRegisters) {
            total[m][r] = hn::MulAdd(acc[m][r], s, total[m][r]);
          } else {
            float* t = chain(m, r);
            hn::Store(hn::MulAdd(acc[m][r], s, hn::Load(df, t)), df, t);
          }
          acc[m][r] = hn::Zero(df);
        }
      }
    }
  }
  HWY_UNROLL(8)
  for (int m = 0; m < kM; ++m) {
    HWY_UNROLL(8)
    for (int r = 0; r < kR; ++r) {
      V sum = acc[m][r];
      if constexpr (kFold) {
        if constexpr (kTotalsInRegisters) {
          sum = total[m][r];
        } else {
          sum = hn::Load(df, chain(m, r));
        }
      }
      if (!b.last) {
        if (!kFold || kTotalsInRegisters) hn::Store(sum, df, chain(m, r));
        continue;
      }
      const float v = ReduceSumF(df, sum);
      float* y = b.y + m * b.y_stride + r0 + r;
      *y = b.accumulate ? *y + v : v;
    }
  }
}

// Panel rows [0, rows) against kM rows of x: tiles of kR weight rows, then single rows.
template <DType kDType, int kM, class DF>
HWY_NOINLINE void PanelBlockRows(DF df, const PanelBlock& b, int64_t rows) {
  constexpr int kR = PanelTileWeights<kDType>();
  int64_t r = 0;
  for (; r + kR <= rows; r += kR) PanelTile<kDType, kM, kR>(df, b, r);
  for (; r < rows; ++r) PanelTile<kDType, kM, 1>(df, b, r);
}

// PanelBlockRows for a block of m <= kM rows of x.
template <DType kDType, int kM, class DF>
HWY_INLINE void PanelBlockRowsOf(DF df, int m, const PanelBlock& b, int64_t rows) {
  if constexpr (kM > 1) {
    if (m < kM) return PanelBlockRowsOf<kDType, kM - 1>(df, m, b, rows);
  }
  PanelBlockRows<kDType, kM>(df, b, rows);
}

// Rows [n_begin, n_end) of y for any number of x rows (strides resolved).
template <DType kDType>
HWY_NOINLINE void PanelRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  const hn::ScalableTag<float> df;
  constexpr int kM = PanelTileRows<kDType>();
  constexpr int kR = PanelTileWeights<kDType>();
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t K = a.w.cols, M = a.num_rows;
  const int64_t stride = (K + 15) / 16 * 16;  // a multiple of every x86 vector length
  const int64_t num_blocks = (K + kFp8BlockSize - 1) / kFp8BlockSize;
  const int64_t chunk = K > kPanelChunkK ? kPanelChunk : K;
  // FP8 totals that do not fit the registers live in the chain copies, as between chunks.
  constexpr bool kTotalsInMemory = kFoldScale<kDType> && 2 * kM * kR + kR + 1 > kVecRegs;
  int64_t panel_rows = std::min(kPanelFloats / stride, kPanelScales / num_blocks);
  if (chunk < K || kTotalsInMemory) panel_rows = std::min(panel_rows, kPanelChunkedRows);
  if (panel_rows >= kR) panel_rows = panel_rows / kR * kR;
  if (panel_rows == 0) {  // rows too long for the panel: stream the matrix per 8 rows of x
    for (int64_t m0 = 0; m0 < M; m0 += kDecodeMaxRows) {
      MatMulArgs c = a;
      c.x = a.x + m0 * a.x_stride;
      c.y = a.y + m0 * a.y_stride;
      c.num_rows = std::min<int64_t>(kDecodeMaxRows, M - m0);
      DecodeRows<kDType>(c, n_begin, n_end);
    }
    return;
  }
  HWY_ALIGN_MAX float w[kPanelFloats];
  float scales[kFoldScale<kDType> ? kPanelScales : 1];
  HWY_ALIGN_MAX float x_aligned[kPanelXFloats];
  HWY_ALIGN_MAX PanelTail x_tail[kM];
  HWY_ALIGN_MAX float chains[kPanelChunkedRows * kM * kPanelLanes];
  // Unaligned rows are copied to aligned storage once per block and panel (loads that straddle
  // cache lines halve the throughput), when they fit.
  const bool aligned = reinterpret_cast<uintptr_t>(a.x) % HWY_MAX_BYTES == 0 &&
                       (a.x_stride * sizeof(float)) % HWY_MAX_BYTES == 0;
  const bool copy_x = !aligned && kM * stride <= kPanelXFloats;
  const int64_t k_full = K - K % N;
  PanelBlock b{.x_tail = x_tail,
               .w = w,
               .w_stride = stride,
               .scales = scales,
               .num_blocks = num_blocks,
               .chains = chains,
               .y_stride = a.y_stride,
               .accumulate = a.accumulate};
  for (int64_t n0 = n_begin; n0 < n_end; n0 += panel_rows) {
    const int64_t rows = std::min(panel_rows, n_end - n0);
    for (int64_t r = 0; r < rows; ++r) {
      ConvertSpanUnscaled<kDType>(df, a.w, n0 + r, K, w + r * stride);
      std::fill(w + r * stride + K, w + (r + 1) * stride, 0.0f);
      if constexpr (kFoldScale<kDType>) {
        const WeightRow row = RowOf(a.w, n0 + r);
        for (int64_t blk = 0; blk < num_blocks; ++blk)
          scales[r * num_blocks + blk] = LoadScale<kDType>(row, blk);
      }
    }
    for (int64_t m0 = 0; m0 < M; m0 += kM) {
      const int m = static_cast<int>(std::min<int64_t>(kM, M - m0));
      b.x = a.x + m0 * a.x_stride;
      b.x_stride = a.x_stride;
      if (copy_x) {
        for (int i = 0; i < m; ++i)
          std::memcpy(x_aligned + i * stride, b.x + i * b.x_stride, K * sizeof(float));
        b.x = x_aligned;
        b.x_stride = stride;
      }
      for (int i = 0; i < m; ++i) {
        hn::Store(hn::Zero(df), df, x_tail[i]);
        std::memcpy(x_tail[i], b.x + i * b.x_stride + k_full, (K - k_full) * sizeof(float));
      }
      b.y = a.y + m0 * a.y_stride + n0;
      for (int64_t k0 = 0; k0 < K; k0 += chunk) {
        b.k_begin = k0;
        b.k_end = std::min(K, k0 + chunk);
        b.first = k0 == 0;
        b.last = b.k_end == K;
        PanelBlockRowsOf<kDType, kM>(df, m, b, rows);
      }
    }
  }
}

// kF4E2M1 (DeepSeek-V4's routed experts): each tile of weight rows is decoded to its exact float
// values on the stack (fp4.h) and multiplied as an F32 weight: for every output the arithmetic
// of an F32 weight holding those values, so a row's result depends neither on M nor on the
// split, in any compute mode (kFast too: FP4 has no fast path yet). Decoding costs a pass over
// the tile per call; a fused FP4 kernel is the V4 speed work's.
constexpr int64_t kFp4TileFloats = 16384;  // 64 KB of stack

template <DType kDType>
HWY_INLINE void GemmRowsT(const MatMulArgs& a, int64_t n_begin, int64_t n_end);

HWY_INLINE void Fp4GemmRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t K = a.w.cols;
  HWY_ASSERT(K <= kFp4TileFloats && K % kFp4BlockSize == 0);
  const int64_t tile = kFp4TileFloats / K;
  HWY_ALIGN_MAX float w[kFp4TileFloats];
  for (int64_t n0 = n_begin; n0 < n_end; n0 += tile) {
    const int64_t rows = std::min(tile, n_end - n0);
    for (int64_t r = 0; r < rows; ++r) DecodeFp4Row(a.w, n0 + r, w + r * K);
    MatMulArgs c = a;
    c.w = WeightView{.dtype = DType::kF32, .rows = rows, .cols = K, .data = w};
    c.y = a.y + n0;
    c.compute = Compute::kExact;
    GemmRowsT<DType::kF32>(c, 0, rows);
  }
}

// Rows [n_begin, n_end) of y = x W^T: the streaming kernel for few rows, else the panel kernel
// (the same arithmetic per output).
template <DType kDType>
HWY_INLINE void GemmRowsT(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.num_rows <= kDecodeMaxRows) {
    DecodeRows<kDType>(a, n_begin, n_end);
  } else {
    PanelRows<kDType>(a, n_begin, n_end);
  }
}

HWY_INLINE void GemmRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.w.dtype == DType::kF4E2M1) return Fp4GemmRows(a, n_begin, n_end);
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
    case DType::kF4E2M1:
      return;  // handled above
    case DType::kF8E8M0:
    case DType::kI8:
    case DType::kI32:
    case DType::kI64:
      HWY_ABORT("MatMul of %s, not a weight dtype", DTypeName(a.w.dtype));
  }
}

}  // namespace epserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // EPSERVE_KERNELS_MATMUL_PANEL_INL_H_ toggle
