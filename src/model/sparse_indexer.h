// DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2; config.sparse), the part of the
// V3.2 family that V3 does not have, behind the attention-selection seam of model.cc
// (docs/architecture.md, "The sparse-attention seam"). Per layer, for the batch's T tokens:
//   q = wq_b(q latent) [heads, 128]; k = LayerNorm(wk(x)) [128]  (x: the normed layer input)
//   RoPE (not interleaved: pairs i, i + R/2) on the first R = qk_rope_head_dim values of each
//   q head and of k; Hadamard rotation of each; FP8 quantization (kernels::QuantizeIndexFp8,
//   UE8M0 scales when the config says so);
//   k (128 FP8 bytes + its float32 scale) goes into the token's cache row of this layer
//   (KvBlocks::IndexKey), beside its latent row;
//   head weights w[h] = weights_proj(x)[h] * heads^-1/2 * q_scale[h] * 128^-1/2;
//   score(s) = k_scale[s] * sum_h w[h] * ReLU(q[h] . k[s]) for s in [0, pos] (causal);
//   the token attends to the index_topk best positions (all of them when pos < index_topk),
//   ties to the lower position.
// The indexer's projections run exact whatever --compute says (it ranks, like the router).
// Under tensor parallelism every rank of the group computes the whole indexer (its cache is
// replicated like the latent rows), so the selections agree bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "base/aligned_vector.h"
#include "base/thread_pool.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/rope.h"
#include "model/weights.h"

namespace epserve {

// The positions each token of a batch attends to (MlaAttentionArgs::token_selected).
struct AttentionSelection {
  bool sparse = false;                // false: every token attends to all of [0, pos]
  std::vector<int32_t> positions;     // all lists, concatenated
  std::vector<int64_t> offsets;       // token t's list starts at positions[offsets[t]]
  std::vector<int32_t> counts;        // its length
  std::vector<const int32_t*> lists;  // &positions[offsets[t]] (after Run)
};

struct IndexerBatch {
  int64_t num_tokens = 0;
  const float* x = nullptr;         // [T, hidden]: the layer's normed input
  const float* q_latent = nullptr;  // [T, q_lora_rank]: q_a_layernorm(q_a_proj(x))
  const int64_t* token_pos = nullptr;
  const int32_t* const* token_blocks = nullptr;  // each token's sequence block table
  const int32_t* token_block = nullptr;          // the block its own row goes to
};

class SparseIndexer {
 public:
  SparseIndexer(const ModelConfig& config, const RopeTable& rope, ThreadPool& pool);

  // Writes every token's indexer key into its row of cache layer `layer`, then selects the
  // positions each token attends to. REQUIRES: the rope table covers the batch's positions.
  void Run(int layer, const IndexerWeights& w, const IndexerBatch& batch, const KvBlocks& kv,
           AttentionSelection* out);

 private:
  const ModelConfig& config_;
  const RopeTable& rope_;
  ThreadPool& pool_;
  AlignedVector<float> q_, k_, head_weights_;
  std::vector<uint8_t> q8_;
  std::vector<float> q_scale_, scores_;
};

}  // namespace epserve
