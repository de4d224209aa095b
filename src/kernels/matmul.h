// y[M, N] = x[M, K] * W^T for a weight W [N, K] stored as F32, BF16 or FP8 e4m3 with 128x128
// block scales, dequantized on the fly (fused). Activations are float32.
// Highway kernels, dispatched once per call to the best target of the CPU:
//   M <= 8 (decode): every weight row is streamed once, a few rows in lock-step, against all
//     rows of x held in cache; memory-bandwidth bound.
//   M > 8 (decode batches, prefill): a panel of weight rows (up to 256 KB as float) is
//     converted once into an L2-resident buffer and multiplied with blocks of x rows by a
//     register tile of vector accumulators, with the same arithmetic per output as M <= 8.
// Every output is one chain of FMAs over K in a fixed order (FP8 block scales folded per
// 128-wide block) and a fixed lane reduction, computed by one thread: a row's result does not
// depend on M (how many other rows share the call) nor on the split of W over threads
// (results may differ between SIMD targets). Work is split over N only (each thread streams
// its own contiguous share of W).
// REQUIRES: x has M rows of x_stride >= K floats; y has M rows of y_stride >= N floats;
// x and y do not overlap. Allocates nothing (scratch lives on the stack, < 400 KB).
#pragma once

#include <cstdint>
#include <span>

#include "base/thread_pool.h"
#include "tensor/weight_view.h"

namespace epserve::kernels {

// How MatMul multiplies (docs/kernels.md, "Compute modes"):
//   kExact: f32 products of the exact weights (FP8 and BF16 dequantized exactly) and f32
//     activations, the kernels above; what the reference tests compare at 1e-3.
//   kFast: activations and weights rounded to bfloat16 and multiplied on the CPU's BF16
//     matrix unit (Intel AMX, matmul_fast.h), f32 sums. Where the CPU has no AMX it runs kExact.
enum class Compute : uint8_t { kExact, kFast };

struct MatMulArgs {
  const float* x = nullptr;
  int64_t x_stride = 0;  // floats between rows of x; 0 means K
  int64_t num_rows = 0;  // M
  WeightView w;          // [N, K]
  float* y = nullptr;
  int64_t y_stride = 0;     // floats between rows of y; 0 means N
  bool accumulate = false;  // y += instead of y =
  Compute compute = Compute::kExact;
};

void MatMul(const MatMulArgs& args, ThreadPool& pool);

// Several independent MatMuls (e.g. the per-head W_uv products, or q_a and kv_a on the same
// input) in one parallel loop: one wake-up of the pool instead of one per product, and the
// threads share out all of the weights. Each result is bit-identical to a MatMul call.
void MatMulBatch(std::span<const MatMulArgs> problems, ThreadPool& pool);

// Scalar reference twin: dequantizes each element and accumulates in double. For
// Compute::kFast it first rounds x and the dequantized weights to bfloat16 as the fast kernel
// does (f32 denormals to zero, round to nearest even).
void MatMulReference(const MatMulArgs& args);

// x rounded to bfloat16 as the fast path rounds it, back as float.
float RoundToBf16(float x);

// y[M, K] = x[M, N] * W for a weight W [N, K] (the transposed use, e.g. MLA's absorbed
// q_nope -> latent projection through W_uk). Work is split over K; deterministic.
struct MatMulTArgs {
  const float* x = nullptr;
  int64_t x_stride = 0;  // 0 means N
  int64_t num_rows = 0;  // M
  WeightView w;          // [N, K]
  float* y = nullptr;
  int64_t y_stride = 0;  // 0 means K
};
void MatMulT(const MatMulTArgs& args, ThreadPool& pool);
// Several independent MatMulTs in one parallel loop (see MatMulBatch).
void MatMulTBatch(std::span<const MatMulTArgs> problems, ThreadPool& pool);
void MatMulTReference(const MatMulTArgs& args);

// Dequantizes W[row, k_begin : k_begin + count] into out (float32).
void DequantizeRow(const WeightView& w, int64_t row, int64_t k_begin, int64_t count, float* out);

}  // namespace epserve::kernels
