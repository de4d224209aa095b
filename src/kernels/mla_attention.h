// MLA attention in the absorbed form over the latent cache (SPEC §2):
//   score(h, s) = scale * (q_abs[h] . c_kv[s] + q_pe[h] . k_pe[s]),  s = 0 .. pos
//   out[h]      = sum_s softmax(score(h, .))[s] * c_kv[s]             (still latent: width L)
// where q_abs[h] = W_uk[h]^T q_nope[h] was formed by the caller, and a cache row is
// [c_kv (L) | k_pe (R)]. Tokens may belong to different sequences of different lengths: each
// token brings a pointer to its sequence's cache and its own position (causal attention).
// Vectorized (Highway, dispatched once per call); heads of a token are processed together so a
// cache row is read once for several heads; the softmax is computed online, in tiles of
// positions. Work is split over (token, head); results are bit-identical for any thread count.
// Allocates nothing.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"

namespace epserve::kernels {

struct MlaAttentionArgs {
  int64_t num_tokens = 0;
  int num_heads = 0;
  int kv_lora_rank = 0;                       // L
  int rope_dim = 0;                           // R
  const float* q_abs = nullptr;               // [num_tokens, num_heads, L]
  const float* q_pe = nullptr;                // [num_tokens, num_heads, R] (RoPE applied)
  const float* const* token_cache = nullptr;  // per token: its sequence's cache, rows of L + R
  const int64_t* token_pos = nullptr;         // per token: attends to cache rows [0, pos]
  float softmax_scale = 1.0f;
  float* out = nullptr;  // [num_tokens, num_heads, L]
  // Unused since the softmax became online; kept so existing callers compile unchanged.
  float* scratch = nullptr;
  int64_t scratch_per_thread = 0;
};

void MlaAttention(const MlaAttentionArgs& args, ThreadPool& pool);

// Scalar reference twin (double accumulation, no scratch needed).
void MlaAttentionReference(const MlaAttentionArgs& args);

}  // namespace epserve::kernels
