// MLA attention in the absorbed form over the latent cache (SPEC §2):
//   score(h, s) = scale * (q_abs[h] . c_kv[s] + q_pe[h] . k_pe[s]),  s = 0 .. pos
//   out[h]      = sum_s softmax(score(h, .))[s] * c_kv[s]             (still latent: width L)
// where q_abs[h] = W_uk[h]^T q_nope[h] was formed by the caller, and a cache row is
// [c_kv (L) | k_pe (R)]. Tokens may belong to different sequences of different lengths: each
// token brings its sequence's block table and its own position (causal attention). The cache is
// paged: position s of a sequence lives in block table[s / block_size], row s % block_size, and
// rows are float32 or bfloat16 (bf16 rows are widened tile by tile into per-thread scratch).
// Vectorized (Highway, dispatched once per call); heads of a token are processed together so a
// cache row is read once for several heads; the softmax is computed online, in tiles of
// positions. Work is split over (token, head); results are bit-identical for any thread count.
// Allocates nothing.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"

namespace epserve::kernels {

enum class CacheType { kF32, kBF16 };

// One layer's view of a paged latent cache. Block b's rows of this layer start at
// base + b * block_stride elements; each holds block_size rows of L + R elements.
struct MlaCacheView {
  const void* base = nullptr;
  int64_t block_stride = 0;  // elements
  int64_t block_size = 0;    // positions per block
  CacheType type = CacheType::kF32;
  // Elements from one row to the next; 0 means L + R. Wider rows carry more after the latent
  // row (DeepSeek-V3.2's indexer key), which attention skips.
  int64_t row_stride = 0;
};

struct MlaAttentionArgs {
  int64_t num_tokens = 0;
  int num_heads = 0;
  int kv_lora_rank = 0;                       // L
  int rope_dim = 0;                           // R
  const float* q_abs = nullptr;               // [num_tokens, num_heads, L]
  const float* q_pe = nullptr;                // [num_tokens, num_heads, R] (RoPE applied)
  MlaCacheView cache;
  const int32_t* const* token_blocks = nullptr;  // per token: its sequence's block table
  const int64_t* token_pos = nullptr;            // per token: attends to cache rows [0, pos]
  // Sparse attention (DeepSeek-V3.2's DSA): when set, token t attends only to the
  // token_num_selected[t] positions token_selected[t] lists (ascending, each <= pos) instead of
  // all of [0, pos]. Listing all of [0, pos] gives the dense result bit for bit.
  const int32_t* const* token_selected = nullptr;
  const int32_t* token_num_selected = nullptr;
  float softmax_scale = 1.0f;
  float* out = nullptr;  // [num_tokens, num_heads, L]
  // bf16 caches only: per thread MlaScratchFloats(L + R) floats (thread t at t * that).
  float* scratch = nullptr;
};

// Scratch floats one thread needs for a bf16 cache of rows `row_width` wide.
int64_t MlaScratchFloats(int64_t row_width);

void MlaAttention(const MlaAttentionArgs& args, ThreadPool& pool);

// Scalar reference twin (double accumulation, no scratch needed).
void MlaAttentionReference(const MlaAttentionArgs& args);

}  // namespace epserve::kernels
