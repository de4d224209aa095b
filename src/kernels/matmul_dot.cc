// AVX512-BF16 kernel of MatMul's fast path (matmul_fast.h, DotMatMulRows): the same numerics
// as the AMX kernel (x and every weight times its block scale rounded to bfloat16, exact
// products, f32 sums) on CPUs with VDPBF16PS but no tile unit (AMD Zen 4/5, Intel Cooper Lake).
//
// Every output y[m, n] is one chain of VDPBF16PS over K in chunks of 64 (two instructions of
// 32 bf16 pairs each), starting from zero, then one fixed 16-lane reduction. Both paths below
// (streaming for M <= 8, panel for more rows) do exactly that, so a row's result depends
// neither on M nor on the split of the rows over threads.
//
// Layout. FP8 weights go through the lookup tables of fp8_bf16_avx512-inl.h (the bf16 of
// e4m3 * scale), high and low bytes interleaved in 128-bit lanes (VPUNPCKLBW / VPUNPCKHBW):
// the first vector of a 64-chunk then holds k = {0-7, 16-23, 32-39, 48-55}, the second the
// rest. The activations are packed once per call in that same order, so no shuffle is spent
// on putting weights back in order. BF16 weights are read as they are (natural order), F32
// weights rounded to bf16.
#include <algorithm>
#include <cstring>

#include "base/aligned_vector.h"
#include "base/check.h"
#include "kernels/matmul_fast.h"
#include "kernels/matmul_i8.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define EPSERVE_DOT_CODE 1
#else
#define EPSERVE_DOT_CODE 0
#endif

namespace epserve::kernels {

#if EPSERVE_DOT_CODE

bool DotMatMulSupported() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || (c & (1u << 27)) == 0) return false;  // OSXSAVE
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool avx512f = b & (1u << 16), avx512dq = b & (1u << 17), avx512bw = b & (1u << 30),
             avx512vl = b & (1u << 31), avx512vbmi = c & (1u << 1);
  if (!(avx512f && avx512dq && avx512bw && avx512vl && avx512vbmi)) return false;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || (a & (1u << 5)) == 0)
    return false;  // AVX512_BF16
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  const uint64_t xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
  const uint64_t need = (1u << 1) | (1u << 2) | (7u << 5);  // SSE, AVX, opmask + ZMM state
  return (xcr0 & need) == need;
}

namespace {

constexpr int64_t kChunk = 64;  // k per step: one 64-byte FP8 load, two bf16 vectors

int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

struct Scratch {
  AlignedVector<uint16_t> xp;     // [M][kp] bf16 activations in the weights' k order
  AlignedVector<uint8_t> tables;  // [K / 128][kTableBytes] of one 128-row scale block
  AlignedVector<uint16_t> panel;  // [rows][kp] converted weights (panel path)
};
Scratch& ThreadScratch() {
  thread_local Scratch s;
  return s;
}

// Weight rows per panel (panel path): about 192 KB of bf16, which stays in L2 while every row
// block of x passes over it; a multiple of the micro-tile's 4 rows.
constexpr int64_t kPanelBytes = 192 << 10;
constexpr int kTileM = 4, kTileN = 4;

// clang (the fuzzing build) spells the target region differently.
#if defined(__clang__)
#pragma clang attribute push(                                                            \
    __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512vbmi,avx512bf16"))), \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx512vbmi,avx512bf16")
#pragma GCC diagnostic push
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized in their own _mm512_undefined_* helpers
// (GCC bug 105593), as in matmul_fast.cc.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "kernels/fp8_bf16_avx512-inl.h"

inline __m512 Dot(__m512 acc, __m512i x, __m512i w) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(x), reinterpret_cast<__m512bh>(w));
}

// x rows as bf16, kp columns each (zeros from K on). FP8 order: within each 64-chunk, the
// first 32 are k = {0-7, 16-23, 32-39, 48-55} and the next 32 the other half (see the top).
void PackX(const MatMulArgs& a, int64_t kp, bool fp8_order, uint16_t* xp) {
  const int64_t K = a.w.cols;
  alignas(64) static constexpr uint16_t kFirst[32] = {0,  1,  2,  3,  4,  5,  6,  7,  16, 17, 18,
                                                      19, 20, 21, 22, 23, 32, 33, 34, 35, 36, 37,
                                                      38, 39, 48, 49, 50, 51, 52, 53, 54, 55};
  const __m512i first = _mm512_load_si512(kFirst);
  const __m512i second = _mm512_add_epi16(first, _mm512_set1_epi16(8));
  for (int64_t m = 0; m < a.num_rows; ++m) {
    const float* x = a.x + m * a.x_stride;
    uint16_t* out = xp + m * kp;
    for (int64_t k = 0; k < kp; k += kChunk) {
      __m512i v[2];
      for (int h = 0; h < 2; ++h) {
        const int64_t kk = k + 32 * h;
        const int64_t left = K - kk;
        const __mmask32 m32 = left >= 32 ? ~__mmask32{0}
                              : left > 0 ? (__mmask32{1} << left) - 1
                                         : 0;
        const __mmask16 lo = static_cast<__mmask16>(m32), hi = static_cast<__mmask16>(m32 >> 16);
        v[h] = PackBf16(_mm512_maskz_loadu_ps(lo, x + kk), _mm512_maskz_loadu_ps(hi, x + kk + 16));
      }
      if (fp8_order) {
        const __m512i a0 = _mm512_permutex2var_epi16(v[0], first, v[1]);
        v[1] = _mm512_permutex2var_epi16(v[0], second, v[1]);
        v[0] = a0;
      }
      _mm512_store_si512(out + k, v[0]);
      _mm512_store_si512(out + k + 32, v[1]);
    }
  }
}

// Tables of one 128-row scale block: the bf16 of e4m3 * scale for every 128-column block.
void BuildTables(const WeightView& w, int64_t scale_row, uint8_t* tables) {
  const int64_t blocks = w.ScaleCols();
  for (int64_t b = 0; b < blocks; ++b)
    BuildFp8Table(w.scale[scale_row * blocks + b], tables + b * kTableBytes);
}

int64_t ScaleRowOf(const WeightView& w, int64_t n) {
  return (n + w.scale_row_offset) / kFp8BlockSize;
}

// 64 k of one weight row from column k, as two bf16 vectors in the k order of the dtype
// (zeros from K on). `t` points at the table of k's 128-column block (FP8 only).
template <DType kDType>
inline void LoadChunk(const void* row, int64_t k, int64_t K, const uint8_t* t, __m512i& w0,
                      __m512i& w1) {
  const int64_t left = K - k;
  if constexpr (kDType == DType::kF8E4M3) {
    const uint8_t* p = static_cast<const uint8_t*>(row) + k;
    const __m512i bytes = left >= kChunk ? _mm512_loadu_si512(p)
                                         : _mm512_maskz_loadu_epi8((__mmask64{1} << left) - 1, p);
    __m512i hi, lo;
    Fp8TableLookup(bytes, t, hi, lo);
    w0 = _mm512_unpacklo_epi8(lo, hi);
    w1 = _mm512_unpackhi_epi8(lo, hi);
  } else if constexpr (kDType == DType::kBF16) {
    const uint16_t* p = static_cast<const uint16_t*>(row) + k;
    if (left >= kChunk) {
      w0 = _mm512_loadu_si512(p);
      w1 = _mm512_loadu_si512(p + 32);
    } else {
      const __mmask64 m = left >= 64 ? ~__mmask64{0} : (__mmask64{1} << left) - 1;
      w0 = _mm512_maskz_loadu_epi16(static_cast<__mmask32>(m), p);
      w1 = _mm512_maskz_loadu_epi16(static_cast<__mmask32>(m >> 32), p + 32);
    }
  } else {
    const float* p = static_cast<const float*>(row) + k;
    const __mmask64 m = left >= 64 ? ~__mmask64{0} : (__mmask64{1} << left) - 1;
    w0 = PackBf16(_mm512_maskz_loadu_ps(static_cast<__mmask16>(m), p),
                  _mm512_maskz_loadu_ps(static_cast<__mmask16>(m >> 16), p + 16));
    w1 = PackBf16(_mm512_maskz_loadu_ps(static_cast<__mmask16>(m >> 32), p + 32),
                  _mm512_maskz_loadu_ps(static_cast<__mmask16>(m >> 48), p + 48));
  }
}

template <DType kDType>
constexpr int64_t kElemBytes = kDType == DType::kF32    ? 4
                               : kDType == DType::kBF16 ? 2
                                                        : 1;

inline void StoreY(const MatMulArgs& a, int64_t m, int64_t n, __m512 acc) {
  const float v = _mm512_reduce_add_ps(acc);
  float* y = a.y + m * a.y_stride + n;
  *y = a.accumulate ? *y + v : v;
}

// Streaming path: kR weight rows [n0, n0 + kR) read once, in lock-step, against all kM rows of
// packed x. FP8 rows of a tile share one scale row (`tables`).
template <DType kDType, int kM, int kR>
inline void StreamTile(const MatMulArgs& a, const uint16_t* xp, int64_t kp, int64_t n0,
                       const uint8_t* tables) {
  const int64_t K = a.w.cols;
  constexpr int64_t kElem = kElemBytes<kDType>;
  const int64_t row_bytes = K * kElem;
  // Prefetch the same columns this many rows ahead (at least 8 KB, as the exact kernel).
  const int64_t ahead = std::max<int64_t>(kR, ((8 << 10) + row_bytes - 1) / row_bytes);
  const uint8_t* rows[kR];
  const uint8_t* next[kR];
  for (int r = 0; r < kR; ++r) {
    rows[r] = static_cast<const uint8_t*>(a.w.data) + (n0 + r) * row_bytes;
    next[r] = rows[r] + std::min<int64_t>(ahead, a.w.rows - 1 - n0 - r) * row_bytes;
  }
  __m512 acc[kM][kR];
#pragma GCC unroll 8
  for (int m = 0; m < kM; ++m)
#pragma GCC unroll 8
    for (int r = 0; r < kR; ++r) acc[m][r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kp; k += kChunk) {
    const uint8_t* t =
        kDType == DType::kF8E4M3 ? tables + (k / kFp8BlockSize) * kTableBytes : nullptr;
    // Row by row: convert one row's 64 weights, multiply them into every x row (x comes from
    // L1), so only two weight vectors are live besides the accumulators.
#pragma GCC unroll 8
    for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 4
      for (int64_t line = 0; line < kChunk * kElem; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(next[r] + k * kElem + line), _MM_HINT_T0);
      __m512i w0, w1;
      LoadChunk<kDType>(rows[r], k, K, t, w0, w1);
#pragma GCC unroll 8
      for (int m = 0; m < kM; ++m) {
        acc[m][r] = Dot(acc[m][r], _mm512_load_si512(xp + m * kp + k), w0);
        acc[m][r] = Dot(acc[m][r], _mm512_load_si512(xp + m * kp + k + 32), w1);
      }
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < kM; ++m)
#pragma GCC unroll 8
    for (int r = 0; r < kR; ++r) StoreY(a, m, n0 + r, acc[m][r]);
}

// Weight rows per streaming tile: kM * kR accumulators, 2 weight vectors, the 4 table vectors
// and a few temporaries in 32 registers; at most 4 streams.
constexpr int StreamRows(int m) { return std::min(4, 22 / m); }

template <DType kDType, int kM>
void StreamRowsM(const MatMulArgs& a, int64_t n_begin, int64_t n_end, const uint16_t* xp,
                 int64_t kp, Scratch& s) {
  constexpr int kR = StreamRows(kM);
  for (int64_t seg = n_begin; seg < n_end;) {
    // One 128-row scale block at a time (FP8), so a tile's rows share their tables.
    int64_t seg_end = n_end;
    const uint8_t* tables = nullptr;
    if constexpr (kDType == DType::kF8E4M3) {
      const int64_t sr = ScaleRowOf(a.w, seg);
      seg_end = std::min(n_end, (sr + 1) * kFp8BlockSize - a.w.scale_row_offset);
      BuildTables(a.w, sr, s.tables.data());
      tables = s.tables.data();
    }
    int64_t n = seg;
    for (; n + kR <= seg_end; n += kR) StreamTile<kDType, kM, kR>(a, xp, kp, n, tables);
    for (; n < seg_end; ++n) StreamTile<kDType, kM, 1>(a, xp, kp, n, tables);
    seg = seg_end;
  }
}

template <DType kDType>
void StreamRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end, const uint16_t* xp, int64_t kp,
                Scratch& s) {
  switch (a.num_rows) {
    case 1:
      return StreamRowsM<kDType, 1>(a, n_begin, n_end, xp, kp, s);
    case 2:
      return StreamRowsM<kDType, 2>(a, n_begin, n_end, xp, kp, s);
    case 3:
      return StreamRowsM<kDType, 3>(a, n_begin, n_end, xp, kp, s);
    case 4:
      return StreamRowsM<kDType, 4>(a, n_begin, n_end, xp, kp, s);
    case 5:
      return StreamRowsM<kDType, 5>(a, n_begin, n_end, xp, kp, s);
    case 6:
      return StreamRowsM<kDType, 6>(a, n_begin, n_end, xp, kp, s);
    case 7:
      return StreamRowsM<kDType, 7>(a, n_begin, n_end, xp, kp, s);
    default:
      return StreamRowsM<kDType, 8>(a, n_begin, n_end, xp, kp, s);
  }
}

// Panel path: rows [n0, n0 + rows) converted once into panel[r][kp] in the same k order and
// chunk layout as LoadChunk returns them.
template <DType kDType>
void ConvertPanel(const WeightView& w, int64_t n0, int64_t rows, int64_t kp, uint16_t* panel,
                  Scratch& s, int64_t& table_row) {
  const int64_t K = w.cols;
  constexpr int64_t kElem = kElemBytes<kDType>;
  const int64_t row_bytes = K * kElem;
  // Converting is faster than memory: without prefetching the panel's first rows (those the
  // previous panel's tiles did not prefetch, PanelPrefetch) wait on every line. Same distance
  // as the streaming path, at least 8 KB ahead.
  const int64_t ahead = std::max<int64_t>(1, ((8 << 10) + row_bytes - 1) / row_bytes);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + (n0 + r) * row_bytes;
    if (n0 + r + ahead < w.rows) {
      const char* next = reinterpret_cast<const char*>(row + ahead * row_bytes);
      for (int64_t line = 0; line < row_bytes; line += 64) _mm_prefetch(next + line, _MM_HINT_T0);
    }
    if constexpr (kDType == DType::kF8E4M3) {
      const int64_t sr = ScaleRowOf(w, n0 + r);
      if (sr != table_row) {
        BuildTables(w, sr, s.tables.data());
        table_row = sr;
      }
    }
    uint16_t* dst = panel + r * kp;
    for (int64_t k = 0; k < kp; k += kChunk) {
      __m512i w0, w1;
      LoadChunk<kDType>(
          row, k, K,
          kDType == DType::kF8E4M3 ? s.tables.data() + (k / kFp8BlockSize) * kTableBytes : nullptr,
          w0, w1);
      _mm512_store_si512(dst + k, w0);
      _mm512_store_si512(dst + k + 32, w1);
    }
  }
}

// The 16 sums of a[0..15] in one vector, lane 4 * L + j holding the sum of a[4 * j + L]: a
// transposed tree (15 adds and 30 shuffles for all 16, against 8 operations each for
// _mm512_reduce_add_ps) that adds exactly the pairs _mm512_reduce_add_ps adds, in the same
// order: lanes i and i + 8, then i and i + 4, i and i + 2, i and i + 1. So an output reduced
// here is bit-identical to the same chain reduced alone (StoreY), which keeps rows independent
// of M (tested against the streaming path, M = 1..15).
inline __m512 ReduceAdd16(const __m512 (&a)[16]) {
  __m512 v[8], w[4], z[2];
  for (int q = 0; q < 8; ++q) {  // lanes i + (i + 8): [a(2q) 0-3 | 4-7 | a(2q+1) 0-3 | 4-7]
    const __m512 lo = _mm512_shuffle_f32x4(a[2 * q], a[2 * q + 1], 0x44);  // 0, 1, 0, 1
    const __m512 hi = _mm512_shuffle_f32x4(a[2 * q], a[2 * q + 1], 0xEE);  // 2, 3, 2, 3
    v[q] = _mm512_add_ps(lo, hi);
  }
  for (int q = 0; q < 4; ++q) {  // lanes i + (i + 4): 128-bit lane j = a(4q + j)
    const __m512 x = _mm512_shuffle_f32x4(v[2 * q], v[2 * q + 1], 0x88);  // 0, 2, 0, 2
    const __m512 y = _mm512_shuffle_f32x4(v[2 * q], v[2 * q + 1], 0xDD);  // 1, 3, 1, 3
    w[q] = _mm512_add_ps(x, y);
  }
  for (int q = 0; q < 2; ++q) {  // lanes i + (i + 2): lane L = [a(8q + L) x2, a(8q + 4 + L) x2]
    const __m512 x = _mm512_shuffle_ps(w[2 * q], w[2 * q + 1], 0x44);  // 0, 1, 0, 1
    const __m512 y = _mm512_shuffle_ps(w[2 * q], w[2 * q + 1], 0xEE);  // 2, 3, 2, 3
    z[q] = _mm512_add_ps(x, y);
  }
  const __m512 x = _mm512_shuffle_ps(z[0], z[1], 0x88);  // 0, 2, 0, 2
  const __m512 y = _mm512_shuffle_ps(z[0], z[1], 0xDD);  // 1, 3, 1, 3
  return _mm512_add_ps(x, y);  // lane L = [a(L), a(4 + L), a(8 + L), a(12 + L)]
}

// kMt x 4 outputs of one panel tile (kMt <= 4): acc[i][j] is y[m0 + i, n + j]. Fewer than 4
// rows reduce zeros in the missing rows' places (each output's own tree is unchanged).
template <int kMt>
inline void StoreTileX4(const MatMulArgs& a, int64_t m0, int64_t n, const __m512 (&acc)[kMt][4]) {
  __m512 t[16];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) t[4 * j + i] = i < kMt ? acc[i][j] : _mm512_setzero_ps();
  alignas(64) float sums[16];
  _mm512_store_ps(sums, ReduceAdd16(t));  // sums[4 * i + j] = y[m0 + i, n + j]
  for (int i = 0; i < kMt; ++i) {
    float* y = a.y + (m0 + i) * a.y_stride + n;
    __m128 v = _mm_load_ps(sums + 4 * i);
    if (a.accumulate) v = _mm_add_ps(v, _mm_loadu_ps(y));
    _mm_storeu_ps(y, v);
  }
}

// kMt x kNt outputs: x rows m0.., panel rows r0.. (rows n0 + r0.. of y).
template <int kMt, int kNt>
inline void PanelTile(const MatMulArgs& a, const uint16_t* xp, const uint16_t* panel, int64_t kp,
                      int64_t m0, int64_t r0, int64_t n0) {
  __m512 acc[kMt][kNt];
#pragma GCC unroll 8
  for (int i = 0; i < kMt; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < kNt; ++j) acc[i][j] = _mm512_setzero_ps();
  const uint16_t* x = xp + m0 * kp;
  const uint16_t* p = panel + r0 * kp;
  for (int64_t k = 0; k < kp; k += 32) {
    __m512i w[kNt];
#pragma GCC unroll 8
    for (int j = 0; j < kNt; ++j) w[j] = _mm512_load_si512(p + j * kp + k);
#pragma GCC unroll 8
    for (int i = 0; i < kMt; ++i) {
      const __m512i xv = _mm512_load_si512(x + i * kp + k);
#pragma GCC unroll 8
      for (int j = 0; j < kNt; ++j) acc[i][j] = Dot(acc[i][j], xv, w[j]);
    }
  }
  if constexpr (kNt == 4) {
    StoreTileX4<kMt>(a, m0, n0 + r0, acc);
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < kMt; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < kNt; ++j) StoreY(a, m0 + i, n0 + r0 + j, acc[i][j]);
  }
}

// Prefetches the weights of the next panel into L2 while the current one is multiplied, a
// few lines per tile, so converting the next panel reads L2 instead of waiting on memory.
struct PanelPrefetch {
  const char* next = nullptr;
  const char* end = nullptr;
  int64_t lines_per_tile = 0;
  void Step() {
    for (int64_t i = 0; i < lines_per_tile && next < end; ++i, next += 64)
      _mm_prefetch(next, _MM_HINT_T1);
  }
};

template <int kMt>
inline void PanelRowBlock(const MatMulArgs& a, const uint16_t* xp, const uint16_t* panel,
                          int64_t kp, int64_t m0, int64_t rows, int64_t n0, PanelPrefetch& pf) {
  int64_t r = 0;
  for (; r + kTileN <= rows; r += kTileN) {
    pf.Step();
    PanelTile<kMt, kTileN>(a, xp, panel, kp, m0, r, n0);
  }
  for (; r < rows; ++r) PanelTile<kMt, 1>(a, xp, panel, kp, m0, r, n0);
}

template <DType kDType>
void PanelRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end, const uint16_t* xp, int64_t kp,
               Scratch& s) {
  const int64_t M = a.num_rows, K = a.w.cols;
  constexpr int64_t kElem = kElemBytes<kDType>;
  const int64_t panel_rows = std::max<int64_t>(kTileN, kPanelBytes / (2 * kp) / kTileN * kTileN);
  if (static_cast<int64_t>(s.panel.size()) < panel_rows * kp) s.panel.resize(panel_rows * kp);
  const char* base = static_cast<const char*>(a.w.data);
  int64_t table_row = -1;
  for (int64_t n0 = n_begin; n0 < n_end; n0 += panel_rows) {
    const int64_t rows = std::min(panel_rows, n_end - n0);
    ConvertPanel<kDType>(a.w, n0, rows, kp, s.panel.data(), s, table_row);
    const int64_t next_rows = std::min(panel_rows, n_end - n0 - rows);
    const int64_t tiles = (M + kTileM - 1) / kTileM * (rows / kTileN);
    PanelPrefetch pf{
        .next = base + (n0 + rows) * K * kElem,
        .end = base + (n0 + rows + next_rows) * K * kElem,
        .lines_per_tile = tiles > 0 ? (next_rows * K * kElem / 64 + tiles) / tiles : 0};
    int64_t m = 0;
    for (; m + kTileM <= M; m += kTileM)
      PanelRowBlock<kTileM>(a, xp, s.panel.data(), kp, m, rows, n0, pf);
    // The last M % 4 rows in one pass over the panel rather than one pass per row.
    switch (M - m) {
      case 3:
        PanelRowBlock<3>(a, xp, s.panel.data(), kp, m, rows, n0, pf);
        break;
      case 2:
        PanelRowBlock<2>(a, xp, s.panel.data(), kp, m, rows, n0, pf);
        break;
      case 1:
        PanelRowBlock<1>(a, xp, s.panel.data(), kp, m, rows, n0, pf);
        break;
    }
  }
}

template <DType kDType>
void DotRowsT(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  Scratch& s = ThreadScratch();
  const int64_t K = a.w.cols, M = a.num_rows;
  const int64_t kp = RoundUp(K, kChunk);
  if (static_cast<int64_t>(s.xp.size()) < M * kp) s.xp.resize(M * kp);
  if (kDType == DType::kF8E4M3 && static_cast<int64_t>(s.tables.size()) <
                                      RoundUp(kp, kFp8BlockSize) / kFp8BlockSize * kTableBytes)
    s.tables.resize(RoundUp(kp, kFp8BlockSize) / kFp8BlockSize * kTableBytes);
  PackX(a, kp, kDType == DType::kF8E4M3, s.xp.data());
  if (M <= 8) return StreamRows<kDType>(a, n_begin, n_end, s.xp.data(), kp, s);
  PanelRows<kDType>(a, n_begin, n_end, s.xp.data(), kp, s);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

}  // namespace

void DotMatMulRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  if (n_end <= n_begin || a.num_rows <= 0) return;
  switch (a.w.dtype) {
    case DType::kF32:
      return DotRowsT<DType::kF32>(a, n_begin, n_end);
    case DType::kBF16:
      return DotRowsT<DType::kBF16>(a, n_begin, n_end);
    case DType::kF8E4M3:
      return DotRowsT<DType::kF8E4M3>(a, n_begin, n_end);
    case DType::kI8Packed:
      return I8GemmRows(a, n_begin, n_end);
    case DType::kF4E2M1:  // GemmRows decodes FP4 weights itself
    case DType::kF8E8M0:
    case DType::kI8:
    case DType::kI32:
    case DType::kI64:
      break;
  }
  CHECK(false) << "the dot kernel has no " << DTypeName(a.w.dtype) << " path";
}

#else  // !EPSERVE_DOT_CODE

bool DotMatMulSupported() { return false; }
void DotMatMulRows(const MatMulArgs&, int64_t, int64_t) {
  CHECK(false) << "no AVX512-BF16 on this CPU";
}

#endif  // EPSERVE_DOT_CODE

}  // namespace epserve::kernels
