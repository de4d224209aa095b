// ExpertLayout (ops.h): the expert-major layout of a MoE layer's (token, slot) pairs made on the
// device from the gate's ids, so the layer needs no host round trip. One block of 1024 threads:
//   1. counts[e] = pairs choosing e (shared-memory atomics, pairs strided over the threads);
//   2. exclusive scan of the counts -> offsets[0 .. E], written out;
//   3. each pair takes the next free row of its expert (shared atomicAdd on a cursor that starts
//      at offsets[e]) -> pair_row.
// The rows of one expert are contiguous and hold exactly its pairs, but their order within the
// expert is whichever order the atomics ran in (not pair order as in LayoutExpertMajor): each
// packed row's MatMul result does not depend on its neighbours, and Combine reads rows through
// pair_row, so results do not depend on it. One block for any number of pairs: its cost grows
// as num_pairs / 1024 shared atomics per thread, microseconds for prefill batches of 10^5 pairs.
#include <string>

#include "cuda/block_scan.cuh"
#include "cuda/ops.h"

namespace epserve::cuda {

namespace {

constexpr int kLayoutThreads = 1024;

// Dynamic shared memory: cursor[E] (int32).
__global__ void __launch_bounds__(kLayoutThreads)
    ExpertLayoutKernel(const int32_t* ids, int64_t num_pairs, int num_experts, int64_t* offsets,
                       int64_t* pair_row) {
  extern __shared__ int32_t cursor[];
  __shared__ int32_t warp_sums[32];
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) cursor[e] = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < num_pairs; i += blockDim.x) {
    const int32_t id = ids[i];
    if (id >= 0 && id < num_experts) atomicAdd(&cursor[id], 1);
  }
  __syncthreads();
  const int32_t total = BlockExclusiveScan(cursor, num_experts, warp_sums);
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) offsets[e] = cursor[e];
  if (threadIdx.x == 0) offsets[num_experts] = total;
  __syncthreads();  // every offset is read before the cursors move
  for (int64_t i = threadIdx.x; i < num_pairs; i += blockDim.x) {
    const int32_t id = ids[i];
    pair_row[i] = id >= 0 && id < num_experts ? atomicAdd(&cursor[id], 1) : -1;
  }
}

}  // namespace

Status ExpertLayout(const int32_t* expert_ids, int64_t num_pairs, int num_experts, int64_t* offsets,
                    int64_t* pair_row, cudaStream_t stream) {
  if (num_experts < 1 || num_experts > kMaxLayoutExperts || num_pairs < 0 || num_pairs > 0x7FFFFFFF)
    return Status::InvalidArgument("ExpertLayout: " + std::to_string(num_pairs) + " pairs over " +
                                   std::to_string(num_experts) +
                                   " experts (at most 2^31 - 1 over " +
                                   std::to_string(kMaxLayoutExperts) + ")");
  if (offsets == nullptr || (num_pairs > 0 && (expert_ids == nullptr || pair_row == nullptr)))
    return Status::InvalidArgument("ExpertLayout: null pointer");
  ExpertLayoutKernel<<<1, kLayoutThreads, num_experts * sizeof(int32_t), stream>>>(
      expert_ids, num_pairs, num_experts, offsets, pair_row);
  return LastLaunch("ExpertLayout");
}

}  // namespace epserve::cuda
