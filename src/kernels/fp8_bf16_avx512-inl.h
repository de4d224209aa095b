// AVX-512 helpers shared by the fast-path kernels (matmul_fast.cc on AMX, matmul_dot.cc on
// AVX512-BF16): rounding floats to bfloat16 and the FP8 e4m3 -> bf16 lookup tables.
// Include only inside a `#pragma GCC target` region that enables avx512f, avx512bw, avx512vl,
// avx512vbmi and avx512bf16, and inside an unnamed namespace (so everything here has internal
// linkage and no function compiled for those targets is merged into code that runs on other
// CPUs), after <immintrin.h>, <cstdint> and tensor/dtype.h at file scope.

// 32 floats (lo: the first 16) -> 32 bf16, round to nearest even.
inline __m512i PackBf16(__m512 lo, __m512 hi) {
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

// FP8 rows go through a lookup table per 128 x 128 scale block instead of arithmetic: the
// bf16 bits of e4m3(v) * scale for the 128 magnitudes v, as a table of high bytes and one of
// low bytes (128 each, two vectors), read with VPERMI2B (7-bit index); the e4m3 sign bit is
// the bf16 sign bit. A few shuffles per 64 weights instead of about 24 instructions of widening,
// scaling and rounding; the values are the same (round to nearest even of the f32 product).
constexpr int64_t kTableBytes = 256;  // 128 high bytes, then 128 low bytes

// 64 FP8 bytes through a table of BuildFp8Table: the high and the low byte of each bf16
// (element i of hi and lo belongs to byte i); the callers interleave them in their own order.
inline void Fp8TableLookup(__m512i bytes, const uint8_t* table, __m512i& hi, __m512i& lo) {
  const __m512i* t = reinterpret_cast<const __m512i*>(table);
  hi = _mm512_permutex2var_epi8(_mm512_load_si512(t), bytes, _mm512_load_si512(t + 1));
  lo = _mm512_permutex2var_epi8(_mm512_load_si512(t + 2), bytes, _mm512_load_si512(t + 3));
  hi = _mm512_ternarylogic_epi32(hi, bytes, _mm512_set1_epi8(static_cast<char>(0x80)),
                                 0xF8);  // hi | sign
}

inline void BuildFp8Table(float scale, uint8_t* table) {
  const __m512 s = _mm512_set1_ps(scale);
  for (int i = 0; i < 4; ++i) {
    const __m512 a = _mm512_mul_ps(_mm512_loadu_ps(epserve::kFp8E4M3ToF32 + 32 * i), s);
    const __m512 b = _mm512_mul_ps(_mm512_loadu_ps(epserve::kFp8E4M3ToF32 + 32 * i + 16), s);
    const __m512i h = PackBf16(a, b);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(table + 32 * i),
                        _mm512_cvtepi16_epi8(_mm512_srli_epi16(h, 8)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(table + 128 + 32 * i), _mm512_cvtepi16_epi8(h));
  }
}
