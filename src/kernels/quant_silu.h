// Fused SwiGLU activation with FP8 block quantization of the result, the dispatch format of
// SPEC §2 (see kernels/quant.h for the format): per row,
//   v = silu(gate) * up,  silu(g) = g / (1 + exp(-g))
//   per 128 consecutive values: scale = amax / 448 (1 for an all-zero block),
//   q = e4m3(v * (1 / scale)), round to nearest even, saturating at +-448.
// One pass over gate and up; v never reaches memory. Rows are independent: work is split over
// rows, results do not depend on the thread count. Allocates nothing.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"

namespace epserve::kernels {

struct SiluMulQuantArgs {
  const float* gate = nullptr;  // [num_rows, row_len] with in_stride between rows
  const float* up = nullptr;    // same layout as gate
  int64_t num_rows = 0;
  int64_t row_len = 0;
  int64_t in_stride = 0;    // floats between rows of gate/up; 0 means row_len
  uint8_t* q = nullptr;     // [num_rows, row_len] e4m3 codes
  float* scales = nullptr;  // [num_rows, ceil(row_len / 128)]
};

void SiluMulQuantFp8(const SiluMulQuantArgs& args, ThreadPool& pool);

// Scalar reference twin (std::exp, F32ToFp8E4M3).
void SiluMulQuantFp8Reference(const SiluMulQuantArgs& args);

// The quantization step alone, vectorized: bit-identical codes and scales to quant.h's
// QuantizeRowFp8 (same formula, exact e4m3 rounding). q: n bytes; scales: ceil(n / 128).
void QuantizeBlocksFp8(const float* x, int64_t n, uint8_t* q, float* scales, bool ue8m0 = false);

}  // namespace epserve::kernels
