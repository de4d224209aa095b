// `epserve bench sparse-attention`: the attention stage of one decode step at DeepSeek-V3.2's
// real shapes (128 heads, latent 512 + rope 64, bf16 cache rows), per layer and sequence, at
// long contexts: V3's dense MLA over all N cached positions against V3.2's DSA (the indexer's
// three projections, its keys scored at every position, the top 2048 chosen, MLA over those).
// The rest of the layer (q/kv projections, o_proj, the MoE) is the same in both and left out.
// Cache contents and weights are random (no prefill); the bytes and FLOPs each variant must
// move are printed beside the times. A benchmark reports what it measured; nothing is asserted.
#pragma once

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"

namespace epserve::kernels {

struct SparseAttentionBenchOptions {
  std::vector<int64_t> contexts = {8192, 16384, 32768};
  int batch = 1;  // sequences per step, each with its own context
  int heads = 128, kv_lora_rank = 512, rope_dim = 64;
  int index_heads = 64, index_dim = 128, index_topk = 2048;
  int hidden = 7168, q_lora_rank = 1536;
  int repeats = 3;  // each time is the best of this many steps
};

struct SparseAttentionBenchRow {
  int64_t context = 0;
  double dense_seconds = 0, sparse_seconds = 0;  // one step, all `batch` sequences
  double indexer_seconds = 0;                    // of sparse: projections, scores, top-k
  double dense_bytes = 0, sparse_bytes = 0;      // cache rows, index keys and weights read
  double dense_flops = 0, sparse_flops = 0;
};

std::vector<SparseAttentionBenchRow> RunSparseAttentionBench(
    const SparseAttentionBenchOptions& options, ThreadPool& pool);

}  // namespace epserve::kernels
