// y[n, w.rows] = x[n, w.cols] W^T through kernels::MatMul (exact compute), with optional
// strides (floats between rows; 0 = dense).
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "kernels/matmul.h"
#include "tensor/weight_view.h"

namespace epserve::v4 {

inline void Project(const float* x, int64_t n, const WeightView& w, float* y, ThreadPool& pool,
                    int64_t x_stride = 0, int64_t y_stride = 0) {
  kernels::MatMul(
      {.x = x, .x_stride = x_stride, .num_rows = n, .w = w, .y = y, .y_stride = y_stride}, pool);
}

}  // namespace epserve::v4
