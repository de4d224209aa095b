// Memory-bandwidth probes the benchmarks compare against, measured in the same run:
// a SIMD streaming read (a sum; each thread reads its own contiguous share as four interleaved
// sequential streams, which is what saturates memory on current CPUs) over a buffer far
// larger than cache, and the STREAM triad a = b + s * c. Buffers are first-touched by the
// threads that read them.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"

namespace epserve::kernels {

struct BandwidthResult {
  double read_gbps = 0;   // bytes read / s, best of `repeats`
  double triad_gbps = 0;  // STREAM triad, counting 3 arrays of 4-byte elements
};

struct BandwidthOptions {
  int64_t bytes = int64_t{1} << 30;  // read buffer size; triad uses three arrays of bytes / 4
  int repeats = 3;
};

BandwidthResult MeasureBandwidth(const BandwidthOptions& options, ThreadPool& pool);

}  // namespace epserve::kernels
