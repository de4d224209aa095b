// Int8 weights and activations (matmul_i8.h): packing at load, activation quantization, the
// AVX512-VNNI kernel and its scalar twin.
//
// Kernel. A tile is kM (<= 4) rows of x times kG (<= 2) groups of 16 weight rows: per block of
// 128 columns, 32 steps of one 64-byte weight load per group (16 rows x 4 columns, u8) and one
// VPDPBUSD per x row and group, the x row's 4 bytes broadcast (s8); the integer sums start at
// -128 * sum(q_x) so that they end as sum(q_x q_w) despite the weights' +128. Then one f32 FMA
// per block folds in the two scales. The weights of a tile column (kG groups, all of K) are
// read from memory once for the first kM rows of x and from cache for the rest.
#include "kernels/matmul_i8.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "base/check.h"
#include "kernels/matmul.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define EPSERVE_VNNI_CODE 1
#else
#define EPSERVE_VNNI_CODE 0
#endif

namespace epserve::kernels {

namespace {

constexpr int64_t kChunks = kI8BlockCols / 4;  // 64-byte steps per group and block
constexpr uint32_t kF32InfBits = 0x7f800000u;

float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The scale of a block whose largest |value| has the bits amax_bits, and whether its values
// are quantized (false: all q are 0, for a zero or non-finite block or a scale that underflows).
float BlockScale(uint32_t amax_bits, bool* quantize) {
  if (amax_bits >= kF32InfBits) {
    *quantize = false;
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float s = BitsToFloat(amax_bits) / 127.0f;
  *quantize = s != 0.0f;
  return s;
}

// round(v / s) to nearest even, clamped to [-127, 127]. |v / s| <= 127 (plus rounding) here,
// so adding and subtracting 1.5 * 2^23 rounds it in the default rounding mode exactly as
// std::nearbyint and VCVTPS2DQ do, without a libm call per weight at load.
int8_t QuantizeValue(float v, float s) {
  constexpr float kRound = 12582912.0f;
  const float shifted = v / s + kRound;  // IEEE f32: not folded without -ffast-math
  const float r = shifted - kRound;
  return static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
}

uint32_t AbsBits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return bits & 0x7fffffffu;
}

}  // namespace

WeightView I8PackedShape(const WeightView& w) {
  WeightView v;
  v.dtype = DType::kI8Packed;
  v.rows = w.rows;
  v.cols = w.cols;
  return v;
}

WeightView PackWeightI8(const WeightView& w, uint8_t* data, float* scale) {
  CHECK(w.dtype != DType::kI8Packed) << "weight is already int8";
  WeightView v = I8PackedShape(w);
  v.data = data;
  v.scale = scale;
  const int64_t kb = v.ScaleCols(), K = w.cols;
  // A group's 16 rows dequantized, then quantized by the activations' rule (the same rule, and
  // vectorized where the CPU allows), then interleaved.
  std::vector<float> rows(kI8GroupRows * K);
  QuantizedRows q;
  for (int64_t g = 0; g < v.I8Groups(); ++g) {
    for (int64_t r = 0; r < kI8GroupRows; ++r) {
      const int64_t n = g * kI8GroupRows + r;
      if (n < w.rows) {
        DequantizeRow(w, n, 0, K, rows.data() + r * K);
      } else {
        std::fill_n(rows.data() + r * K, K, 0.0f);
      }
    }
    QuantizeRows(rows.data(), kI8GroupRows, K, K, q);
    for (int64_t b = 0; b < kb; ++b) {
      uint8_t* block = data + (g * kb + b) * kI8GroupBytes;
      for (int64_t r = 0; r < kI8GroupRows; ++r) {
        scale[(g * kb + b) * kI8GroupRows + r] = q.scale[r * kb + b];
        const int8_t* qr = q.q.data() + (r * kb + b) * kI8BlockCols;
        for (int64_t j = 0; j < kChunks; ++j)
          for (int64_t t = 0; t < 4; ++t)
            block[j * 64 + r * 4 + t] = static_cast<uint8_t>(qr[4 * j + t] + 128);
      }
    }
  }
  return v;
}

float I8PackedValue(const WeightView& w, int64_t r, int64_t k) {
  const int64_t kb = w.ScaleCols(), g = r / kI8GroupRows, b = k / kI8BlockCols;
  const int64_t kk = k % kI8BlockCols, rr = r % kI8GroupRows;
  const uint8_t byte = static_cast<const uint8_t*>(
      w.data)[(g * kb + b) * kI8GroupBytes + (kk / 4) * 64 + rr * 4 + kk % 4];
  return static_cast<float>(static_cast<int>(byte) - 128) *
         w.scale[(g * kb + b) * kI8GroupRows + rr];
}

QuantizedRowsView QuantizedRowsView::Rows(int64_t begin, int64_t count) const {
  QuantizedRowsView v = *this;
  v.rows = count;
  v.q = q + begin * blocks * kI8BlockCols;
  v.scale = scale + begin * blocks;
  v.sum = sum + begin * blocks;
  return v;
}

QuantizedRowsView QuantizedRows::View() const {
  return {.q = q.data(), .scale = scale.data(), .sum = sum.data(), .rows = rows, .blocks = blocks};
}

namespace {
void ResizeQuantizedRows(int64_t rows, int64_t cols, QuantizedRows& out) {
  out.rows = rows;
  out.blocks = (cols + kI8BlockCols - 1) / kI8BlockCols;
  const size_t blocks = static_cast<size_t>(rows * out.blocks);
  if (out.q.size() < blocks * kI8BlockCols) out.q.resize(blocks * kI8BlockCols);
  if (out.scale.size() < blocks) out.scale.resize(blocks);
  if (out.sum.size() < blocks) out.sum.resize(blocks);
}

// Rows [begin, end) of x into out, sized already (the CPU's best path, defined below).
void QuantizeRowRange(const float* x, int64_t cols, int64_t x_stride, int64_t begin, int64_t end,
                      QuantizedRows& out);

void QuantizeRangeScalar(const float* x, int64_t cols, int64_t x_stride, int64_t begin, int64_t end,
                         QuantizedRows& out) {
  for (int64_t m = begin; m < end; ++m) {
    for (int64_t b = 0; b < out.blocks; ++b) {
      const int64_t k0 = b * kI8BlockCols, count = std::min(kI8BlockCols, cols - k0);
      const float* xs = x + m * x_stride + k0;
      int8_t* q = out.q.data() + (m * out.blocks + b) * kI8BlockCols;
      uint32_t amax = 0;
      for (int64_t k = 0; k < count; ++k) amax = std::max(amax, AbsBits(xs[k]));
      bool quantize = false;
      const float s = BlockScale(amax, &quantize);
      int32_t sum = 0;
      for (int64_t k = 0; k < kI8BlockCols; ++k) {
        q[k] = quantize && k < count ? QuantizeValue(xs[k], s) : 0;
        sum += q[k];
      }
      out.scale[m * out.blocks + b] = s;
      out.sum[m * out.blocks + b] = sum;
    }
  }
}
}  // namespace

void QuantizeRowsScalar(const float* x, int64_t rows, int64_t cols, int64_t x_stride,
                        QuantizedRows& out) {
  ResizeQuantizedRows(rows, cols, out);
  QuantizeRangeScalar(x, cols, x_stride, 0, rows, out);
}

void QuantizeRows(const float* x, int64_t rows, int64_t cols, int64_t x_stride,
                  QuantizedRows& out) {
  ResizeQuantizedRows(rows, cols, out);
  QuantizeRowRange(x, cols, x_stride, 0, rows, out);
}

void QuantizeRows(const float* x, int64_t rows, int64_t cols, int64_t x_stride, QuantizedRows& out,
                  ThreadPool& pool) {
  ResizeQuantizedRows(rows, cols, out);
  const size_t grain = static_cast<size_t>(std::max<int64_t>(1, 8192 / std::max<int64_t>(1, cols)));
  pool.ParallelFor(static_cast<size_t>(rows), grain, [&](size_t b, size_t e, int) {
    QuantizeRowRange(x, cols, x_stride, static_cast<int64_t>(b), static_cast<int64_t>(e), out);
  });
}

void I8MatMulRowsScalar(const I8MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t kb = a.w.ScaleCols();
  CHECK(a.x.blocks == kb) << "activations have " << a.x.blocks << " blocks, weights " << kb;
  const uint8_t* data = static_cast<const uint8_t*>(a.w.data);
  for (int64_t n = n_begin; n < n_end; ++n) {
    const int64_t g = n / kI8GroupRows, r = n % kI8GroupRows;
    for (int64_t m = 0; m < a.x.rows; ++m) {
      float acc = 0.0f;
      for (int64_t b = 0; b < kb; ++b) {
        const uint8_t* block = data + (g * kb + b) * kI8GroupBytes;
        const int8_t* xq = a.x.q + (m * kb + b) * kI8BlockCols;
        int32_t d = -128 * a.x.sum[m * kb + b];
        for (int64_t k = 0; k < kI8BlockCols; ++k)
          d += static_cast<int32_t>(block[(k / 4) * 64 + r * 4 + k % 4]) * xq[k];
        const float s = a.x.scale[m * kb + b] * a.w.scale[(g * kb + b) * kI8GroupRows + r];
        acc = std::fma(static_cast<float>(d), s, acc);
      }
      float& y = a.y[m * a.y_stride + n];
      y = a.accumulate ? y + acc : acc;
    }
  }
}

void I8GemmRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  thread_local QuantizedRows q;
  QuantizeRows(a.x, a.num_rows, a.w.cols, a.x_stride, q);
  I8MatMulRows(
      {.x = q.View(), .w = a.w, .y = a.y, .y_stride = a.y_stride, .accumulate = a.accumulate},
      n_begin, n_end);
}

#if EPSERVE_VNNI_CODE

namespace {

bool CpuHasVnni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || (c & (1u << 27)) == 0) return false;  // OSXSAVE
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool avx512f = b & (1u << 16), avx512bw = b & (1u << 30), vnni = c & (1u << 11);
  if (!(avx512f && avx512bw && vnni)) return false;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  const uint64_t xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
  const uint64_t need = (1u << 1) | (1u << 2) | (7u << 5);  // SSE, AVX, opmask + ZMM state
  return (xcr0 & need) == need;
}

// clang (the fuzzing build) spells the target region differently.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vnni")
#pragma GCC diagnostic push
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized in their own _mm512_undefined_* helpers
// (GCC bug 105593), as in matmul_fast.cc.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

void QuantizeRangeAvx512(const float* x, int64_t cols, int64_t x_stride, int64_t begin, int64_t end,
                         QuantizedRows& out) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (int64_t m = begin; m < end; ++m) {
    for (int64_t b = 0; b < out.blocks; ++b) {
      const int64_t k0 = b * kI8BlockCols, count = std::min(kI8BlockCols, cols - k0);
      const float* xs = x + m * x_stride + k0;
      int8_t* q = out.q.data() + (m * out.blocks + b) * kI8BlockCols;
      __m512 v[8];
      __m512i amax = _mm512_setzero_si512();
      for (int i = 0; i < 8; ++i) {
        const int64_t left = count - i * 16;
        const __mmask16 mask = left >= 16 ? 0xffff : left > 0 ? (__mmask16{1} << left) - 1 : 0;
        v[i] = _mm512_maskz_loadu_ps(mask, xs + i * 16);
        amax = _mm512_max_epu32(amax, _mm512_and_si512(_mm512_castps_si512(v[i]), abs_mask));
      }
      bool quantize = false;
      const float s = BlockScale(_mm512_reduce_max_epu32(amax), &quantize);
      __m512i sum = _mm512_setzero_si512();
      const __m512 sv = _mm512_set1_ps(s);
      for (int i = 0; i < 8; ++i) {
        __m512i qi = _mm512_setzero_si512();
        if (quantize) {
          qi = _mm512_cvtps_epi32(_mm512_div_ps(v[i], sv));  // nearest even (MXCSR default)
          qi = _mm512_min_epi32(_mm512_max_epi32(qi, lo), hi);
        }
        sum = _mm512_add_epi32(sum, qi);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i * 16), _mm512_cvtsepi32_epi8(qi));
      }
      out.scale[m * out.blocks + b] = s;
      out.sum[m * out.blocks + b] = _mm512_reduce_add_epi32(sum);
    }
  }
}

// `next`: the first byte of the next tile column's weights (null for none), prefetched step by
// step while this one is multiplied: the blocks b with b % passes == pass, for row tile `pass`
// of `passes`. It streams from memory while the cached weights of this column serve the rows.
// One row times one group has a single chain of 32 dependent VPDPBUSDs per block: it is split
// over two accumulators (even and odd steps; integer sums, so exactly the same result).
template <int kM, int kG>
void Tile(const I8MatMulArgs& a, int64_t m0, int64_t g0, int64_t n_end, const uint8_t* next,
          int64_t pass, int64_t passes) {
  constexpr int kChains = kM * kG == 1 ? 2 : 1;
  const int64_t kb = a.w.ScaleCols();
  const uint8_t* data = static_cast<const uint8_t*>(a.w.data);
  __m512 facc[kM][kG];
  for (int m = 0; m < kM; ++m)
    for (int i = 0; i < kG; ++i) facc[m][i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < kb; ++b) {
    __m512i iacc[kChains][kM][kG];
    const int8_t* xq[kM];
    for (int m = 0; m < kM; ++m) {
      const int64_t mb = (m0 + m) * kb + b;
      xq[m] = a.x.q + mb * kI8BlockCols;
      const __m512i init = _mm512_set1_epi32(-128 * a.x.sum[mb]);
      for (int i = 0; i < kG; ++i) {
        iacc[0][m][i] = init;
        for (int c = 1; c < kChains; ++c) iacc[c][m][i] = _mm512_setzero_si512();
      }
    }
    const uint8_t* wb[kG];
    for (int i = 0; i < kG; ++i) wb[i] = data + ((g0 + i) * kb + b) * kI8GroupBytes;
    const bool prefetch = next != nullptr && b % passes == pass;
#pragma GCC unroll 4
    for (int64_t j0 = 0; j0 < kChunks; j0 += kChains) {
      for (int c = 0; c < kChains; ++c) {
        const int64_t j = j0 + c;
        __m512i w[kG];
        for (int i = 0; i < kG; ++i) w[i] = _mm512_load_si512(wb[i] + j * 64);
        if (prefetch) {
          const char* p = reinterpret_cast<const char*>(next + b * kI8GroupBytes + j * 64);
          _mm_prefetch(p, _MM_HINT_T0);
          _mm_prefetch(p + kb * kI8GroupBytes, _MM_HINT_T0);
        }
        for (int m = 0; m < kM; ++m) {
          int32_t four;
          std::memcpy(&four, xq[m] + j * 4, 4);
          const __m512i xb = _mm512_set1_epi32(four);
          for (int i = 0; i < kG; ++i) iacc[c][m][i] = _mm512_dpbusd_epi32(iacc[c][m][i], w[i], xb);
        }
      }
    }
    for (int c = 1; c < kChains; ++c)
      for (int m = 0; m < kM; ++m)
        for (int i = 0; i < kG; ++i) iacc[0][m][i] = _mm512_add_epi32(iacc[0][m][i], iacc[c][m][i]);
    for (int i = 0; i < kG; ++i) {
      const __m512 sw = _mm512_loadu_ps(a.w.scale + ((g0 + i) * kb + b) * kI8GroupRows);
      for (int m = 0; m < kM; ++m) {
        const __m512 s = _mm512_mul_ps(_mm512_set1_ps(a.x.scale[(m0 + m) * kb + b]), sw);
        facc[m][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[0][m][i]), s, facc[m][i]);
      }
    }
  }
  for (int i = 0; i < kG; ++i) {
    const int64_t n = (g0 + i) * kI8GroupRows, left = n_end - n;
    if (left <= 0) break;
    const __mmask16 mask = left >= 16 ? 0xffff : (__mmask16{1} << left) - 1;
    for (int m = 0; m < kM; ++m) {
      float* y = a.y + (m0 + m) * a.y_stride + n;
      __m512 v = facc[m][i];
      if (a.accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y), v);
      _mm512_mask_storeu_ps(y, mask, v);
    }
  }
}

// `prefetch`: prefetch the next tile column (see Tile); off where the columns are read in
// memory order, which the hardware prefetcher follows by itself.
template <int kG>
void TileColumn(const I8MatMulArgs& a, int64_t g0, int64_t n_end, bool prefetch) {
  const int64_t M = a.x.rows;
  const uint8_t* next =
      !prefetch ? nullptr
      : (g0 + kG) * kI8GroupRows < n_end
          ? static_cast<const uint8_t*>(a.w.data) + (g0 + kG) * a.w.ScaleCols() * kI8GroupBytes
          : static_cast<const uint8_t*>(a.next_weights);
  // The row tiles share out the prefetch: pass p takes the blocks b with b % passes == p, so
  // the next column streams in at an even pace over this column's work, not in one burst.
  const int64_t passes = (M + 3) / 4;
  int64_t m0 = 0, pass = 0;
  for (; m0 + 4 <= M; m0 += 4, ++pass) Tile<4, kG>(a, m0, g0, n_end, next, pass, passes);
  switch (M - m0) {
    case 3:
      return Tile<3, kG>(a, m0, g0, n_end, next, pass, passes);
    case 2:
      return Tile<2, kG>(a, m0, g0, n_end, next, pass, passes);
    case 1:
      return Tile<1, kG>(a, m0, g0, n_end, next, pass, passes);
    default:
      return;
  }
}

// Up to this many activation rows, a tile column is one 16-row group. Its 16 KB (at 1024
// columns) are contiguous and the groups follow one another, so the weights are read as one
// sequential stream; two groups at a time are two streams 16 KB apart, which this kind of
// machine (AMD Zen 5, measured) reads from DRAM a third slower: 20 against 29 GB/s on one core,
// and the b1 routed experts 1.8 against 1.4 ms per step. Beyond it the rows' work is what
// counts, and two groups share each activation broadcast.
constexpr int64_t kSingleStreamRows = 4;

void I8MatMulRowsAvx512(const I8MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.x.rows <= kSingleStreamRows) {
    for (int64_t g = n_begin / kI8GroupRows; g * kI8GroupRows < n_end; ++g)
      TileColumn<1>(a, g, n_end, /*prefetch=*/false);
    return;
  }
  for (int64_t g0 = n_begin / kI8GroupRows; g0 * kI8GroupRows < n_end; g0 += 2) {
    if ((g0 + 1) * kI8GroupRows < n_end) {
      TileColumn<2>(a, g0, n_end, /*prefetch=*/true);
    } else {
      TileColumn<1>(a, g0, n_end, /*prefetch=*/true);
    }
  }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

}  // namespace

bool I8MatMulAccelerated() {
  static const bool accelerated = [] {
    const char* off = std::getenv("EPSERVE_NO_VNNI");
    if (off != nullptr && *off != '\0' && std::strcmp(off, "0") != 0) return false;
    return CpuHasVnni();
  }();
  return accelerated;
}

namespace {
void QuantizeRowRange(const float* x, int64_t cols, int64_t x_stride, int64_t begin, int64_t end,
                      QuantizedRows& out) {
  if (I8MatMulAccelerated()) return QuantizeRangeAvx512(x, cols, x_stride, begin, end, out);
  QuantizeRangeScalar(x, cols, x_stride, begin, end, out);
}
}  // namespace

void I8MatMulRows(const I8MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  CHECK(n_begin % kI8GroupRows == 0) << "int8 rows from " << n_begin;
  CHECK(a.x.blocks == a.w.ScaleCols())
      << "activations have " << a.x.blocks << " blocks, weights " << a.w.ScaleCols();
  if (n_end <= n_begin || a.x.rows <= 0) return;
  if (I8MatMulAccelerated()) return I8MatMulRowsAvx512(a, n_begin, n_end);
  I8MatMulRowsScalar(a, n_begin, n_end);
}

#else  // !EPSERVE_VNNI_CODE

bool I8MatMulAccelerated() { return false; }

namespace {
void QuantizeRowRange(const float* x, int64_t cols, int64_t x_stride, int64_t begin, int64_t end,
                      QuantizedRows& out) {
  QuantizeRangeScalar(x, cols, x_stride, begin, end, out);
}
}  // namespace

void I8MatMulRows(const I8MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  CHECK(n_begin % kI8GroupRows == 0) << "int8 rows from " << n_begin;
  if (n_end <= n_begin || a.x.rows <= 0) return;
  I8MatMulRowsScalar(a, n_begin, n_end);
}

#endif  // EPSERVE_VNNI_CODE

}  // namespace epserve::kernels
