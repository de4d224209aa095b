#include "tensor/weight_view.h"

#include "base/check.h"

namespace epserve {

WeightView WeightView::RowSlice(int64_t begin, int64_t count) const {
  CHECK(begin >= 0 && count >= 0 && begin + count <= rows);
  WeightView v = *this;
  v.rows = count;
  if (dtype == DType::kI8Packed) {
    CHECK(begin % kI8GroupRows == 0)
        << "int8 weight rows sliced at " << begin << ", not a multiple of " << kI8GroupRows;
    const int64_t groups = begin / kI8GroupRows;
    v.data = static_cast<const uint8_t*>(data) + groups * ScaleCols() * kI8GroupBytes;
    v.scale = scale + groups * ScaleCols() * kI8GroupRows;
    return v;
  }
  v.data = static_cast<const uint8_t*>(data) + begin * RowBytes();
  if (dtype == DType::kF8E4M3) v.scale_row_offset = scale_row_offset + begin;
  if (dtype == DType::kF4E2M1) v.scale_ue8m0 = scale_ue8m0 + begin * (cols / kFp4BlockSize);
  return v;
}

}  // namespace epserve
