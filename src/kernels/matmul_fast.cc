// AMX BF16 kernel of MatMul's fast path (see matmul_fast.h), and the choice between it and the
// AVX512-BF16 kernel (matmul_dot.cc). x86-64 only; elsewhere FastMatMulAvailable() is false
// and MatMul runs the exact kernels.
//
// The target-specific code is compiled for AVX-512 + AMX by a GCC target pragma around this
// file's own functions only (nothing inline from other headers is defined inside it), and is
// reached only after the run-time check.
#include "kernels/matmul_fast.h"

#include <cstdlib>
#include <cstring>

#include "base/aligned_vector.h"
#include "base/check.h"
#include "kernels/matmul_i8.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define EPSERVE_AMX_CODE 1
#else
#define EPSERVE_AMX_CODE 0
#endif

namespace epserve::kernels {

#if EPSERVE_AMX_CODE
namespace {

// AMX needs everything the AVX512-BF16 kernel needs (the FP8 tables and the packing are AVX-512
// code) plus the tile instructions and the OS's tile configuration state.
bool CpuAndOsHaveAmx() {
  if (!DotMatMulSupported()) return false;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24);
  if (!(amx_bf16 && amx_tile)) return false;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  // Tile configuration (17) the OS enables; tile data (18) is enabled per process by the
  // permission request below.
  return (lo & (1u << 17)) != 0;
}

bool RequestTilePermission() {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtileData = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
}

}  // namespace

bool AmxMatMulSupported() { return CpuAndOsHaveAmx() && RequestTilePermission(); }

namespace {

constexpr int64_t kTileRows = 16;   // rows of every tile
constexpr int64_t kTileK = 32;      // bf16 of k per tile row (64 bytes)
constexpr int64_t kPanelRows = 32;  // weight rows converted together: two A tiles

int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

struct Scratch {
  AlignedVector<uint8_t> tables;  // FP8 lookup tables: [2 scale rows][K / 128][256 bytes]
  AlignedVector<uint16_t> panel;  // [kPanelRows][kKBlock] bf16 weights
  AlignedVector<uint32_t> xp;     // [mpad / 16][kpad / 32][16 pairs][16 rows] bf16 pairs
  AlignedVector<float> c;         // [row groups][4 C tiles of 16 x 16]
};
Scratch& ThreadScratch() {
  thread_local Scratch s;
  return s;
}

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// The AMX / AVX-512 code below is compiled for those targets whatever the build's baseline
// (the callers check the CPU first). clang (the fuzzing build) spells it differently.
#if defined(__clang__)
#pragma clang attribute push(                                                                  \
    __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512vbmi,avx512bf16,amx-tile," \
                          "amx-bf16"))),                                                       \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx512vbmi,avx512bf16,amx-tile,amx-bf16")
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized in their own _mm512_undefined_* helpers
// (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/fp8_bf16_avx512-inl.h"

// 32 elements (BF16 or F32) of a weight row from element k as bf16, zero where the mask is
// clear. `row` points at the row's first element.
template <DType kDType>
inline __m512i WeightChunk(const void* row, int64_t k, __mmask32 mask) {
  if constexpr (kDType == DType::kBF16) {
    return _mm512_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(row) + k);
  } else {
    const float* p = static_cast<const float*>(row) + k;
    const __mmask16 lo = static_cast<__mmask16>(mask), hi = static_cast<__mmask16>(mask >> 16);
    return PackBf16(_mm512_maskz_loadu_ps(lo, p), _mm512_maskz_loadu_ps(hi, p + 16));
  }
}

// The weights are converted in blocks of 32 rows x kKBlock columns (16 KB of bf16, which stays
// in L1 while the tiles read it); each row's next block is prefetched while this one is
// converted (for the last block, the same row of the next panel).
constexpr int64_t kKBlock = 256;

inline void PrefetchNext(const uint8_t* row, int64_t k_next_bytes, int64_t row_bytes,
                         int64_t panel_bytes, int64_t line) {
  const uint8_t* p = k_next_bytes < row_bytes ? row + k_next_bytes
                                              : row + panel_bytes + (k_next_bytes - row_bytes);
  _mm_prefetch(reinterpret_cast<const char*>(p + line), _MM_HINT_T0);
}

// 64 FP8 bytes -> 64 bf16 (two vectors, in order) through a table of BuildFp8Table.
inline void Fp8ToBf16(__m512i bytes, const uint8_t* table, __m512i& first, __m512i& second) {
  __m512i hi, lo;
  Fp8TableLookup(bytes, table, hi, lo);
  // Interleave to little-endian bf16: element i = lo[i] | hi[i] << 8.
  alignas(64) static constexpr uint8_t kFirst[64] = {
      0,  64, 1,  65, 2,  66, 3,  67, 4,  68, 5,  69, 6,  70, 7,  71, 8,  72, 9,  73, 10, 74,
      11, 75, 12, 76, 13, 77, 14, 78, 15, 79, 16, 80, 17, 81, 18, 82, 19, 83, 20, 84, 21, 85,
      22, 86, 23, 87, 24, 88, 25, 89, 26, 90, 27, 91, 28, 92, 29, 93, 30, 94, 31, 95};
  const __m512i first_idx = _mm512_load_si512(kFirst);
  const __m512i second_idx = _mm512_add_epi8(first_idx, _mm512_set1_epi8(32));
  first = _mm512_permutex2var_epi8(lo, first_idx, hi);
  second = _mm512_permutex2var_epi8(lo, second_idx, hi);
}

// Columns [k0, k0 + kKBlock) of weight rows [n0, n0 + 32) as bf16 into panel[32][kKBlock]
// (zero rows from n_end on, zero columns from K on). k0 is a multiple of kKBlock.
void ConvertPanelFp8(const WeightView& w, int64_t n0, int64_t n_end, int64_t k0, uint16_t* panel,
                     Scratch& scratch) {
  const int64_t K = w.cols, blocks = w.ScaleCols();
  const int64_t first_scale_row = (n0 + w.scale_row_offset) / kFp8BlockSize;
  const int64_t last_row = (n_end < n0 + kPanelRows ? n_end : n0 + kPanelRows) - 1;
  const int64_t scale_rows = (last_row + w.scale_row_offset) / kFp8BlockSize - first_scale_row + 1;
  constexpr int64_t kBlocksPerK = kKBlock / kFp8BlockSize;
  if (scratch.tables.size() < static_cast<size_t>(2 * kBlocksPerK * kTableBytes))
    scratch.tables.resize(2 * kBlocksPerK * kTableBytes);
  for (int64_t t = 0; t < scale_rows; ++t)
    for (int64_t b = 0; b < kBlocksPerK && k0 / kFp8BlockSize + b < blocks; ++b)
      BuildFp8Table(w.scale[(first_scale_row + t) * blocks + k0 / kFp8BlockSize + b],
                    scratch.tables.data() + (t * kBlocksPerK + b) * kTableBytes);
  for (int64_t r = 0; r < kPanelRows; ++r) {
    uint16_t* dst = panel + r * kKBlock;
    const int64_t n = n0 + r;
    if (n >= n_end) {
      std::memset(dst, 0, kKBlock * sizeof(uint16_t));
      continue;
    }
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * K;
    const uint8_t* tables =
        scratch.tables.data() +
        ((n + w.scale_row_offset) / kFp8BlockSize - first_scale_row) * kBlocksPerK * kTableBytes;
    for (int64_t j = 0; j < kKBlock; j += 64) {
      const int64_t k = k0 + j;
      PrefetchNext(row, k + kKBlock, K, kPanelRows * K, 0);
      const int64_t left = K - k;
      const __m512i bytes = left >= 64 ? _mm512_loadu_si512(row + k)
                            : left > 0
                                ? _mm512_maskz_loadu_epi8((__mmask64{1} << left) - 1, row + k)
                                : _mm512_setzero_si512();
      __m512i first, second;
      Fp8ToBf16(bytes, tables + (j / kFp8BlockSize) * kTableBytes, first, second);
      _mm512_store_si512(dst + j, first);
      _mm512_store_si512(dst + j + kTileK, second);
    }
  }
}

template <DType kDType>
void ConvertPanelT(const WeightView& w, int64_t n0, int64_t n_end, int64_t k0, uint16_t* panel) {
  constexpr int64_t kElem = kDType == DType::kF32 ? 4 : 2;
  const int64_t K = w.cols;
  for (int64_t r = 0; r < kPanelRows; ++r) {
    uint16_t* dst = panel + r * kKBlock;
    const int64_t n = n0 + r;
    if (n >= n_end) {
      std::memset(dst, 0, kKBlock * sizeof(uint16_t));
      continue;
    }
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * K * kElem;
    for (int64_t j = 0; j < kKBlock; j += kTileK) {
      const int64_t k = k0 + j;
      for (int64_t line = 0; line < kTileK * kElem; line += 64)
        PrefetchNext(row, (k + kKBlock) * kElem, K * kElem, kPanelRows * K * kElem, line);
      const int64_t left = K - k;
      const __mmask32 mask = left >= kTileK ? ~__mmask32{0}
                             : left > 0     ? (__mmask32{1} << left) - 1
                                            : 0;
      _mm512_store_si512(dst + j, WeightChunk<kDType>(row, k, mask));
    }
  }
}

void ConvertPanel(const WeightView& w, int64_t n0, int64_t n_end, int64_t k0, uint16_t* panel,
                  Scratch& scratch) {
  switch (w.dtype) {
    case DType::kF32:
      return ConvertPanelT<DType::kF32>(w, n0, n_end, k0, panel);
    case DType::kBF16:
      return ConvertPanelT<DType::kBF16>(w, n0, n_end, k0, panel);
    case DType::kF8E4M3:
      return ConvertPanelFp8(w, n0, n_end, k0, panel, scratch);
    case DType::kI8Packed:
    case DType::kF4E2M1:
      break;  // never reached: GemmRows runs int8 and FP4 weights on their own kernels
    case DType::kF8E8M0:
    case DType::kI8:
    case DType::kI32:
    case DType::kI64:
      break;  // no weight's dtype (tensor/dtype.h)
  }
}

// x rows as B tiles: for row block b (16 rows), k chunk c and pair p, the 16 dwords of
// tile (b, c), row p are {bf16(x[16b + j][32c + 2p]), bf16(x[16b + j][32c + 2p + 1])} for
// j = 0..15 (zeros past M and K).
void PackX(const MatMulArgs& a, int64_t mpad, int64_t kpad, uint32_t* xp) {
  const int64_t M = a.num_rows, K = a.w.cols, chunks = kpad / kTileK;
  alignas(64) uint32_t row[kTileRows];
  for (int64_t b = 0; b < mpad / kTileRows; ++b) {
    for (int64_t j = 0; j < kTileRows; ++j) {
      const int64_t m = b * kTileRows + j;
      const float* x = a.x + m * a.x_stride;
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t k = c * kTileK;
        __m512i v = _mm512_setzero_si512();
        if (m < M && k < K) {
          const int64_t count = K - k < kTileK ? K - k : kTileK;
          const __mmask32 m32 = count >= 32 ? ~__mmask32{0} : (__mmask32{1} << count) - 1;
          const __mmask16 lo = static_cast<__mmask16>(m32), hi = static_cast<__mmask16>(m32 >> 16);
          v = PackBf16(_mm512_maskz_loadu_ps(lo, x + k), _mm512_maskz_loadu_ps(hi, x + k + 16));
        }
        _mm512_store_si512(row, v);
        uint32_t* tile = xp + (b * chunks + c) * kTileRows * kTileRows;
        for (int64_t p = 0; p < kTileRows; ++p) tile[p * kTileRows + j] = row[p];
      }
    }
  }
}

// C tile [n][m] (16 x 16 floats) into y[m][n] for the rows and columns that exist.
void StoreTransposed(const MatMulArgs& a, const float* c, int64_t n0, int64_t n_end, int64_t m0) {
  const int64_t rows = a.num_rows - m0 < kTileRows ? a.num_rows - m0 : kTileRows;
  const int64_t cols = n_end - n0 < kTileRows ? n_end - n0 : kTileRows;
  for (int64_t j = 0; j < rows; ++j) {
    float* y = a.y + (m0 + j) * a.y_stride + n0;
    if (a.accumulate) {
      for (int64_t i = 0; i < cols; ++i) y[i] += c[i * kTileRows + j];
    } else {
      for (int64_t i = 0; i < cols; ++i) y[i] = c[i * kTileRows + j];
    }
  }
}

// One weight block (32 rows x kKBlock columns, panel) against x rows [m0, m0 + 16 * kM):
// C += A * B over the block's chunks. Tiles: C 0..3 ([m tile][n tile]), A 4, 5 (the panel's
// two row tiles), B 6, 7. `chunks` is how many of the block's 32-column chunks exist.
template <int kM>
void BlockTimesX(const uint16_t* panel, const uint32_t* b0, const uint32_t* b1, int64_t chunks) {
  constexpr int64_t kAStride = kKBlock * sizeof(uint16_t), kBStride = kTileRows * sizeof(uint32_t);
  constexpr int64_t kTileDwords = kTileRows * kTileRows;
  for (int64_t c = 0; c < chunks; ++c) {
    _tile_loadd(4, panel + c * kTileK, kAStride);
    _tile_loadd(5, panel + kTileRows * kKBlock + c * kTileK, kAStride);
    _tile_loadd(6, b0 + c * kTileDwords, kBStride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 5, 6);
    if constexpr (kM == 2) {
      _tile_loadd(7, b1 + c * kTileDwords, kBStride);
      _tile_dpbf16ps(2, 4, 7);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
}

constexpr int64_t kCFloats = 4 * kTileRows * kTileRows;  // one row group's C tiles
constexpr int64_t kCStride = kTileRows * sizeof(float);

void ZeroC() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}
void LoadC(const float* c) {
  _tile_loadd(0, c, kCStride);
  _tile_loadd(1, c + 256, kCStride);
  _tile_loadd(2, c + 512, kCStride);
  _tile_loadd(3, c + 768, kCStride);
}
void StoreC(float* c) {
  _tile_stored(0, c, kCStride);
  _tile_stored(1, c + 256, kCStride);
  _tile_stored(2, c + 512, kCStride);
  _tile_stored(3, c + 768, kCStride);
}

// A row group's finished C tiles (c[mt * 2 + nt], [n][m] each) into y.
void WriteGroup(const MatMulArgs& a, const float* c, int kM, int64_t n0, int64_t n_end,
                int64_t m0) {
  for (int mt = 0; mt < kM; ++mt) {
    const int64_t mm = m0 + mt * kTileRows;
    if (mm >= a.num_rows) break;
    for (int nt = 0; nt < 2; ++nt) {
      const int64_t nn = n0 + nt * kTileRows;
      if (nn >= n_end) break;
      StoreTransposed(a, c + (mt * 2 + nt) * kTileRows * kTileRows, nn, n_end, mm);
    }
  }
}

void AmxRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t M = a.num_rows, K = a.w.cols;
  const int64_t kpad = RoundUp(K, kKBlock);
  const int64_t chunks_total = RoundUp(K, kTileK) / kTileK;
  const int64_t mpad = RoundUp(M, M > kTileRows ? 2 * kTileRows : kTileRows);
  const int64_t groups = mpad <= kTileRows ? 1 : mpad / (2 * kTileRows);
  const int kM = mpad <= kTileRows ? 1 : 2;
  Scratch& s = ThreadScratch();
  if (s.panel.size() < static_cast<size_t>(2 * kPanelRows * kKBlock))
    s.panel.resize(2 * kPanelRows * kKBlock);
  const int64_t xp_dwords = mpad * kpad / 2;
  if (static_cast<int64_t>(s.xp.size()) < xp_dwords) s.xp.resize(xp_dwords);
  if (static_cast<int64_t>(s.c.size()) < groups * kCFloats) s.c.resize(groups * kCFloats);
  PackX(a, mpad, kpad, s.xp.data());

  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = kTileRows;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
  const int64_t chunks_per_group = kpad / kTileK;  // xp holds kpad columns per 16-row block
  constexpr int64_t kTileDwords = kTileRows * kTileRows;
  // Two panel buffers: the next block is converted while the tile unit multiplies this one
  // (its instructions run asynchronously behind the conversion's).
  constexpr int64_t kPanelElems = kPanelRows * kKBlock;
  ConvertPanel(a.w, n_begin, n_end, 0, s.panel.data(), s);
  int64_t block = 0;
  for (int64_t n0 = n_begin; n0 < n_end; n0 += kPanelRows) {
    for (int64_t k0 = 0; k0 < kpad; k0 += kKBlock, ++block) {
      const uint16_t* panel = s.panel.data() + (block & 1) * kPanelElems;
      uint16_t* next = s.panel.data() + ((block + 1) & 1) * kPanelElems;
      const int64_t c0 = k0 / kTileK;
      const int64_t chunks =
          chunks_total - c0 < kKBlock / kTileK ? chunks_total - c0 : kKBlock / kTileK;
      // The next block: this panel's next columns, or the next panel's first.
      auto convert_next = [&] {
        if (k0 + kKBlock < kpad) {
          ConvertPanel(a.w, n0, n_end, k0 + kKBlock, next, s);
        } else if (n0 + kPanelRows < n_end) {
          ConvertPanel(a.w, n0 + kPanelRows, n_end, 0, next, s);
        }
      };
      for (int64_t g = 0; g < groups; ++g) {
        const uint32_t* b0 = s.xp.data() + (g * kM * chunks_per_group + c0) * kTileDwords;
        const uint32_t* b1 = b0 + chunks_per_group * kTileDwords;
        float* cg = s.c.data() + g * kCFloats;
        // One row group keeps its C tiles in registers across blocks; more go through memory.
        if (kM == 1) {
          if (k0 == 0) ZeroC();
          BlockTimesX<1>(panel, b0, b1, chunks);
          convert_next();  // while the tile unit works
          if (k0 + kKBlock >= kpad) {
            StoreC(cg);
          }
        } else {
          if (k0 == 0) {
            ZeroC();
          } else if (groups > 1) {
            LoadC(cg);
          }
          BlockTimesX<2>(panel, b0, b1, chunks);
          if (groups == 1) convert_next();
          if (groups > 1 || k0 + kKBlock >= kpad) StoreC(cg);
        }
      }
      if (groups > 1) convert_next();
    }
    for (int64_t g = 0; g < groups; ++g)
      WriteGroup(a, s.c.data() + g * kCFloats, kM, n0, n_end, g * kM * kTileRows);
  }
  _tile_release();
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

}  // namespace

void AmxMatMulRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  if (n_end <= n_begin || a.num_rows <= 0) return;
  AmxRows(a, n_begin, n_end);
}

#else  // !EPSERVE_AMX_CODE

bool AmxMatMulSupported() { return false; }
void AmxMatMulRows(const MatMulArgs&, int64_t, int64_t) { CHECK(false) << "no AMX on this CPU"; }

#endif  // EPSERVE_AMX_CODE

namespace {
bool EnvSet(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}
}  // namespace

FastKernel FastMatMulKernel() {
  static const FastKernel kernel = [] {
    if (!EnvSet("EPSERVE_NO_AMX") && AmxMatMulSupported()) return FastKernel::kAmx;
    if (!EnvSet("EPSERVE_NO_BF16_DOT") && DotMatMulSupported()) return FastKernel::kAvx512Bf16;
    return FastKernel::kNone;
  }();
  return kernel;
}

const char* FastKernelName(FastKernel kernel) {
  switch (kernel) {
    case FastKernel::kAmx:
      return "amx";
    case FastKernel::kAvx512Bf16:
      return "avx512-bf16";
    case FastKernel::kNone:
      break;
  }
  return "none";
}

void FastMatMulRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.w.dtype == DType::kI8Packed) return I8GemmRows(a, n_begin, n_end);
  switch (FastMatMulKernel()) {
    case FastKernel::kAmx:
      return AmxMatMulRows(a, n_begin, n_end);
    case FastKernel::kAvx512Bf16:
      return DotMatMulRows(a, n_begin, n_end);
    case FastKernel::kNone:
      break;
  }
  CHECK(false) << "FastMatMulRows without a fast kernel on this CPU";
}

}  // namespace epserve::kernels
