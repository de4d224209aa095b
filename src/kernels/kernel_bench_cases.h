// Internal to the kernel benchmarks (kernel_bench.cc, gemm_peak.cc): weight/activation
// generators, the timer, and the benchmark cases beyond the plain matmul.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/kernel_bench.h"
#include "tensor/weight_view.h"

namespace epserve::kernels {

struct BenchWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> scale;
  WeightView view;
};

// Random weights [n, k] (FP8: random non-NaN codes with 128x128 block scales).
BenchWeight MakeBenchWeight(DType dtype, int64_t n, int64_t k, uint64_t seed);
std::vector<float> BenchVector(int64_t n, uint64_t seed);
const char* BenchDTypeName(DType dtype);

// Runs fn once to warm up, then `repeats` times; returns the fastest run in seconds.
double BestSeconds(int repeats, const std::function<void()>& fn);

void AddGroupedMlpRows(const KernelBenchOptions& opt, ThreadPool& pool,
                       std::vector<KernelBenchRow>& rows);
void AddAttentionRows(const KernelBenchOptions& opt, ThreadPool& pool,
                      std::vector<KernelBenchRow>& rows);
void AddSiluQuantRows(const KernelBenchOptions& opt, ThreadPool& pool,
                      std::vector<KernelBenchRow>& rows);

}  // namespace epserve::kernels
