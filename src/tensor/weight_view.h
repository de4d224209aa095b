// A non-owning view of a 2-D weight matrix W [rows, cols] as stored in a checkpoint
// (Hugging Face nn.Linear layout: rows = output features, cols = input features, y = x W^T).
// FP8 weights carry one float32 scale per 128x128 tile: scale[(r/128) * scale_cols + c/128],
// real value = fp8 * scale. The viewed memory (often a memory-mapped file) must outlive the view.
//
// kI8Packed (weights requantized to int8 at load, docs/kernels.md "Int8 weights") is laid out
// for the int8 kernel: rows in groups of kI8GroupRows, columns in blocks of kI8BlockCols (both
// zero-padded). Group g, block b is kI8GroupBytes at data + (g * ScaleCols() + b) *
// kI8GroupBytes: 32 chunks of 64 bytes, chunk j holding for each row r = 0..15 the four bytes
// of columns 4j..4j+3 of the block, each q + 128 (q in [-127, 127]). Its scales are 16 floats
// per group and block, scale[(g * ScaleCols() + b) * 16 + r]; real value = q * scale.
//
// kF4E2M1 (DeepSeek-V4's routed experts): row r is cols / 2 bytes at data + r * cols / 2, two
// e2m1 values a byte (element 2j in the low nibble of byte j), and cols / 32 UE8M0 scale bytes
// at scale_ue8m0 + r * cols / 32; real value = kFp4E2M1ToF32[nibble] * 2^(scale byte - 127).
// cols is a multiple of 32.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace epserve {

constexpr int64_t kI8GroupRows = 16;
constexpr int64_t kI8BlockCols = 128;
constexpr int64_t kI8GroupBytes = kI8GroupRows * kI8BlockCols;

struct WeightView {
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;            // rows * cols elements, row-major (kI8Packed: see above)
  const float* scale = nullptr;          // kF8E4M3: ScaleRows() x ScaleCols(); kI8Packed: see above
  const uint8_t* scale_ue8m0 = nullptr;  // kF4E2M1: rows x cols / 32 scale bytes
  // Row r of this view is row r + scale_row_offset of the tensor the scales belong to
  // (non-zero for row slices that do not start on a 128-row tile).
  int64_t scale_row_offset = 0;

  int64_t ScaleRows() const {
    return (rows + scale_row_offset + kFp8BlockSize - 1) / kFp8BlockSize;
  }
  int64_t ScaleCols() const { return (cols + kFp8BlockSize - 1) / kFp8BlockSize; }
  int64_t I8Groups() const { return (rows + kI8GroupRows - 1) / kI8GroupRows; }
  bool empty() const { return data == nullptr; }
  // Bytes of the elements, of the scales (0 for F32 and BF16), and a full read of the weight
  // (both).
  // Bytes of one row's elements (not for kI8Packed, whose rows are interleaved in groups).
  int64_t RowBytes() const {
    return dtype == DType::kF4E2M1 ? cols / 2 : cols * static_cast<int64_t>(DTypeSize(dtype));
  }
  int64_t DataBytes() const {
    if (dtype == DType::kI8Packed) return I8Groups() * ScaleCols() * kI8GroupBytes;
    return rows * RowBytes();
  }
  int64_t ScaleBytes() const {
    if (dtype == DType::kF4E2M1) return rows * (cols / kFp4BlockSize);
    if (dtype == DType::kI8Packed)
      return I8Groups() * ScaleCols() * kI8GroupRows * static_cast<int64_t>(sizeof(float));
    return dtype == DType::kF8E4M3 ? ScaleRows() * ScaleCols() * static_cast<int64_t>(sizeof(float))
                                   : 0;
  }
  int64_t Bytes() const { return DataBytes() + ScaleBytes(); }
  // A view of rows [begin, begin + count); any begin, also for FP8; for kI8Packed a multiple
  // of kI8GroupRows.
  WeightView RowSlice(int64_t begin, int64_t count) const;
};

}  // namespace epserve
