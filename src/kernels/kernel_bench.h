// Kernel benchmarks behind `epserve bench kernels`: per kernel and shape, the achieved GB/s
// against the streaming-read bandwidth measured in the same run, and for prefill (compute-
// bound) shapes the GFLOP/s against OpenBLAS sgemm on the same, dequantized, matrices.
// A benchmark reports what it measured; it never asserts on time.
// Allocates its own buffers (it is a tool, not a kernel); not for concurrent use of one pool.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/membw.h"

namespace epserve::kernels {

struct KernelBenchOptions {
  // Decode matmuls stream weight matrices of about this size (the goal is >= 64 MB).
  int64_t decode_weight_bytes = int64_t{64} << 20;
  std::vector<int> decode_rows = {1, 2, 4, 8};
  std::vector<int> prefill_rows = {256, 1024};
  int prefill_dim = 4096;      // prefill weights are prefill_dim x prefill_dim
  int repeats = 5;             // each measurement reports the best of this many runs
  double bandwidth_gib = 0.5;  // probe buffer; the probe runs three times, the best counts
  bool quick = false;          // smaller shapes, fewer repeats (tests, smoke runs)
};

struct KernelBenchRow {
  std::string kernel;  // matmul | grouped_mlp | mla_attention | silu_mul_quant_fp8
  std::string dtype;   // weight (or cache) element type: fp8 | bf16 | f32
  std::string shape;   // human-readable, e.g. "M=1 N=8192 K=8192"
  std::string regime;  // "memory" (judged by GB/s) or "compute" (judged by GFLOP/s)
  double bytes = 0;    // bytes one call must move from memory (weights + scales + activations)
  double flops = 0;    // floating-point operations of one call (2 per multiply-add)
  double seconds = 0;  // best time of one call
  double gbps = 0;     // bytes / seconds / 1e9
  double fraction_of_read_bandwidth = 0;  // gbps / same-run streaming read
  double gflops = 0;
  double blas_gflops = 0;       // OpenBLAS sgemm, same shape, dequantized f32 weight
  double fraction_of_blas = 0;  // gflops / blas_gflops (compute regime only)
};

struct KernelBenchResult {
  int threads = 0;
  std::string simd_target;  // Highway target the kernels dispatched to
  BandwidthResult bandwidth;
  std::vector<KernelBenchRow> rows;
};

KernelBenchResult RunKernelBench(const KernelBenchOptions& options, ThreadPool& pool);

}  // namespace epserve::kernels
