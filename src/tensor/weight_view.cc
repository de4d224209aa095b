#include "tensor/weight_view.h"

#include "base/check.h"

namespace epserve {

WeightView WeightView::RowSlice(int64_t begin, int64_t count) const {
  CHECK(begin >= 0 && count >= 0 && begin + count <= rows);
  WeightView v = *this;
  v.rows = count;
  v.data = static_cast<const uint8_t*>(data) + begin * cols * static_cast<int64_t>(DTypeSize(dtype));
  if (dtype == DType::kF8E4M3) v.scale_row_offset = scale_row_offset + begin;
  return v;
}

}  // namespace epserve
