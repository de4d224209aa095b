// A non-owning view of a 2-D weight matrix W [rows, cols] as stored in a checkpoint
// (Hugging Face nn.Linear layout: rows = output features, cols = input features, y = x W^T).
// FP8 weights carry one float32 scale per 128x128 tile: scale[(r/128) * scale_cols + c/128],
// real value = fp8 * scale. The viewed memory (often a memory-mapped file) must outlive the view.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace epserve {

struct WeightView {
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;       // rows * cols elements, row-major
  const float* scale = nullptr;     // kF8E4M3 only: ScaleRows() x ScaleCols()
  // Row r of this view is row r + scale_row_offset of the tensor the scales belong to
  // (non-zero for row slices that do not start on a 128-row tile).
  int64_t scale_row_offset = 0;

  int64_t ScaleRows() const { return (rows + scale_row_offset + kFp8BlockSize - 1) / kFp8BlockSize; }
  int64_t ScaleCols() const { return (cols + kFp8BlockSize - 1) / kFp8BlockSize; }
  bool empty() const { return data == nullptr; }
  // Bytes of the elements, of the FP8 block scales (0 for other dtypes), and a full read of the
  // weight (both).
  int64_t DataBytes() const { return rows * cols * static_cast<int64_t>(DTypeSize(dtype)); }
  int64_t ScaleBytes() const {
    return dtype == DType::kF8E4M3 ? ScaleRows() * ScaleCols() * static_cast<int64_t>(sizeof(float)) : 0;
  }
  int64_t Bytes() const { return DataBytes() + ScaleBytes(); }
  // A view of rows [begin, begin + count); any begin, also for FP8.
  WeightView RowSlice(int64_t begin, int64_t count) const;
};

}  // namespace epserve
