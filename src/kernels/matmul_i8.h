// Int8 weights and activations (LoadOptions::requant = kInt8, `--requant int8`;
// docs/kernels.md "Int8 weights"): the CPU's 8-bit dot products (AVX512-VNNI VPDPBUSD, 64
// multiply-adds per instruction, twice VDPBF16PS) on weights requantized once at load.
//
// Numerics, the same for the kernel and its scalar twin, bit for bit:
//   weights: w = the exact value (FP8 times its block scale, BF16, F32); per row n and block b
//     of 128 columns, s_w = max|w| / 127 and q_w = round(w / s_w) (f32 division, nearest even;
//     0 when the block is all zero);
//   activations: the same per row m and block b of x: s_x, q_x;
//   y[m, n] = sum over b, in order, of acc = fma(float(sum_k q_x q_w), s_x * s_w, acc) from
//     acc = 0; the integer dot is exact (|sum| < 2^21), so only the per-block step rounds.
// So a row's result depends neither on M nor on the split of the rows over threads.
// Non-finite activations make their block's scale NaN: the outputs they touch are NaN, as on
// the other paths.
#pragma once

#include <cstdint>

#include "base/aligned_vector.h"
#include "kernels/matmul.h"
#include "tensor/weight_view.h"

namespace epserve::kernels {

// Requantizes w (F32, BF16 or FP8 with its block scales) into a kI8Packed view over `data`
// (I8PackedView(w).DataBytes() bytes, 64-byte aligned) and `scale` (its ScaleBytes()).
WeightView PackWeightI8(const WeightView& w, uint8_t* data, float* scale);
// The kI8Packed view a packing of w would have, without data (for sizes).
WeightView I8PackedShape(const WeightView& w);
// Element (r, k) of a kI8Packed weight: q * scale.
float I8PackedValue(const WeightView& w, int64_t r, int64_t k);

// Rows of activations quantized per 128-column block.
struct QuantizedRowsView {
  const int8_t* q = nullptr;     // [rows][blocks * 128], zero past the columns
  const float* scale = nullptr;  // [rows][blocks]
  const int32_t* sum = nullptr;  // [rows][blocks]: sum of the block's q
  int64_t rows = 0, blocks = 0;
  QuantizedRowsView Rows(int64_t begin, int64_t count) const;
};
struct QuantizedRows {
  AlignedVector<int8_t> q;
  AlignedVector<float> scale;
  AlignedVector<int32_t> sum;
  int64_t rows = 0, blocks = 0;
  QuantizedRowsView View() const;
};
// x [rows, cols] (x_stride floats apart) into out (grown as needed).
void QuantizeRows(const float* x, int64_t rows, int64_t cols, int64_t x_stride, QuantizedRows& out);
void QuantizeRowsScalar(const float* x, int64_t rows, int64_t cols, int64_t x_stride,
                        QuantizedRows& out);
// The same, the rows shared out over the pool (a few KB of x per chunk; small inputs inline).
void QuantizeRows(const float* x, int64_t rows, int64_t cols, int64_t x_stride, QuantizedRows& out,
                  ThreadPool& pool);

struct I8MatMulArgs {
  QuantizedRowsView x;  // M = x.rows; x.blocks == w.ScaleCols()
  WeightView w;         // kI8Packed [N, K]
  float* y = nullptr;
  int64_t y_stride = 0;  // >= N
  bool accumulate = false;
  // Optional: the packed weights the caller multiplies next (same number of column blocks),
  // whose first rows are prefetched while the last rows of this call are multiplied.
  const void* next_weights = nullptr;
};
// Rows [n_begin, n_end) of y; n_begin a multiple of kI8GroupRows. The AVX512-VNNI kernel where
// the CPU has it (I8MatMulAccelerated), else the scalar twin.
void I8MatMulRows(const I8MatMulArgs& a, int64_t n_begin, int64_t n_end);
void I8MatMulRowsScalar(const I8MatMulArgs& a, int64_t n_begin, int64_t n_end);
// MatMul's rows [n_begin, n_end) for kI8Packed weights (strides resolved): quantizes a.x
// itself (once per call, into a per-thread buffer), then I8MatMulRows. MatMulBatch and
// GroupedMlp quantize each input once for all threads instead.
void I8GemmRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end);
// x86-64 with AVX512-F/BW/VNNI and the OS's ZMM state; false when EPSERVE_NO_VNNI is set.
bool I8MatMulAccelerated();

}  // namespace epserve::kernels
