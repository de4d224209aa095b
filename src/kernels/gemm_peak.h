// The compute ceiling the decode benchmark sets beside the bandwidth one: the GFLOP/s of the
// engine's prefill matmul (the panel kernel at M = 512) on a weight that stays in cache,
// measured in the same run. A step cannot run its multiply-adds faster than this.
#pragma once

#include "base/thread_pool.h"

namespace epserve::kernels {

struct GemmPeakOptions {
  int rows = 512;  // M; the weight is dim x dim BF16 (2 MB: cache-resident)
  int dim = 1024;
  int repeats = 5;  // the best run counts
};

// Best GFLOP/s of MatMul (M = rows, BF16 weight) over `repeats` runs.
double MeasureGemmPeakGflops(const GemmPeakOptions& options, ThreadPool& pool);

}  // namespace epserve::kernels
