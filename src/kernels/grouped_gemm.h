// Grouped expert MLP over expert-major packed rows (SPEC §2, §6 GroupGEMM):
//   for each group g, rows r in [offsets[g], offsets[g+1]):
//     h[r]   = silu(x[r] Wgate_g^T) * (x[r] Wup_g^T)          (gate/up fused, SwiGLU)
//     out[r] = h[r] Wdown_g^T
// Row counts are read from `offsets` at run time; empty groups cost nothing and their weights
// are never touched. Two parallel passes (gate/up, then down), each over (group, weight-row
// tile) work items split contiguously between threads, so every thread streams its own share
// of the touched experts' weights. Groups of <= 8 rows use the streaming (decode) kernel,
// larger ones the panel kernel, with the same arithmetic per output: a row's result depends
// neither on how many rows its group has (expert parallelism and the step's batch change that)
// nor on the thread count.
// Allocates nothing; the caller provides h.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "kernels/matmul.h"
#include "tensor/weight_view.h"

namespace epserve::kernels {

// One expert's SwiGLU weights: gate and up [intermediate, hidden], down [hidden, intermediate].
struct ExpertMlpWeights {
  WeightView gate, up, down;
};

struct GroupedMlpArgs {
  int num_groups = 0;
  const ExpertMlpWeights* experts = nullptr;  // [num_groups]: the weights of each group
  const int64_t* offsets = nullptr;           // [num_groups + 1], non-decreasing, offsets[0] = 0
  const float* x = nullptr;                   // [offsets[num_groups], hidden]
  float* h = nullptr;                         // scratch [offsets[num_groups], intermediate]
  float* out = nullptr;                       // [offsets[num_groups], hidden]; overwritten
  Compute compute = Compute::kExact;          // of every projection (see MatMulArgs)
  // > 0: the SwiGLU clamp of DeepSeek-V4 (gate <- min(gate, limit), up <- clamp(up, -limit,
  // limit)) before silu(gate) * up; 0: none.
  float swiglu_limit = 0;
};

// REQUIRES: every group with rows has weights of the same hidden and intermediate sizes;
// x, h and out do not overlap.
void GroupedMlp(const GroupedMlpArgs& args, ThreadPool& pool);

// Scalar reference twin (MatMulReference for each projection, SiLU in double).
void GroupedMlpReference(const GroupedMlpArgs& args);

}  // namespace epserve::kernels
