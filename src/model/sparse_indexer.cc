#include "model/sparse_indexer.h"

#include <cmath>
#include <cstring>
#include <numeric>

#include "base/check.h"
#include "kernels/matmul.h"
#include "kernels/sparse_index.h"

namespace epserve {

namespace {

constexpr float kLayerNormEps = 1e-6f;  // DeepSeek's LayerNorm default

// LayerNorm with weight and bias (biased variance), in place; sums in double.
void LayerNorm(float* x, const float* weight, const float* bias, int n) {
  double mean = 0;
  for (int i = 0; i < n; ++i) mean += x[i];
  mean /= n;
  double var = 0;
  for (int i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= n;
  const double inv = 1.0 / std::sqrt(var + kLayerNormEps);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>((x[i] - mean) * inv) * weight[i] + bias[i];
}

// RoPE on pairs (i, i + R/2), not adjacent ones: the indexer's layout. cos_sin is the model's
// table row (cos, sin of pair i at 2i, 2i + 1).
void ApplyRopeHalves(float* x, const float* cos_sin, int rope_dim) {
  const int half = rope_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
    const float a = x[i], b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = a * s + b * c;
  }
}

}  // namespace

SparseIndexer::SparseIndexer(const ModelConfig& config, const RopeTable& rope, ThreadPool& pool)
    : config_(config), rope_(rope), pool_(pool) {
  CHECK(config.sparse.enabled() && config.sparse.index_head_dim == kernels::kIndexBlock);
}

void SparseIndexer::Run(int layer, const IndexerWeights& w, const IndexerBatch& b,
                        const KvBlocks& kv, AttentionSelection* out) {
  const ModelConfig& c = config_;
  const int64_t T = b.num_tokens;
  const int H = c.sparse.index_n_heads, D = c.sparse.index_head_dim, R = c.qk_rope_head_dim;
  const int64_t K = c.sparse.index_topk;
  q_.resize(T * H * D);
  k_.resize(T * D);
  head_weights_.resize(T * H);
  q8_.resize(T * H * D);
  q_scale_.resize(T * H);
  if (T > 0) {
    const kernels::MatMulArgs from_x[] = {
        {.x = b.x, .num_rows = T, .w = w.wk, .y = k_.data()},
        {.x = b.x, .num_rows = T, .w = w.weights_proj, .y = head_weights_.data()}};
    kernels::MatMulBatch(from_x, pool_);
    kernels::MatMul({.x = b.q_latent, .num_rows = T, .w = w.wq_b, .y = q_.data()}, pool_);
  }
  // Keys into the cache, queries quantized; both are per token and independent.
  const float head_scale = 1.0f / std::sqrt(static_cast<float>(H)),
              dim_scale = 1.0f / std::sqrt(static_cast<float>(D));
  pool_.ParallelFor(static_cast<size_t>(T), 1, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      const float* cs = rope_.Row(b.token_pos[t]);
      float* k = &k_[t * D];
      LayerNorm(k, w.k_norm.data(), w.k_norm_bias.data(), D);
      ApplyRopeHalves(k, cs, R);
      kernels::HadamardRotate(k, D);
      uint8_t* key = kv.IndexKey(b.token_block[t], layer, b.token_pos[t] % kv.block_size);
      const float k_scale = kernels::QuantizeIndexFp8(k, D, c.ue8m0_scales, key);
      std::memcpy(key + D, &k_scale, sizeof(float));
      for (int h = 0; h < H; ++h) {
        float* q = &q_[(t * H + h) * D];
        ApplyRopeHalves(q, cs, R);
        kernels::HadamardRotate(q, D);
        const float s = kernels::QuantizeIndexFp8(q, D, c.ue8m0_scales, &q8_[(t * H + h) * D]);
        q_scale_[t * H + h] = s;
        float& hw = head_weights_[t * H + h];
        hw = hw * head_scale * s * dim_scale;
      }
    }
  });
  // Selection. A token with at most index_topk positions attends to all of them.
  out->offsets.resize(T);
  out->counts.resize(T);
  int64_t total = 0;
  bool sparse = false;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n = b.token_pos[t] + 1;
    out->offsets[t] = total;
    out->counts[t] = static_cast<int32_t>(std::min(n, K));
    total += out->counts[t];
    sparse = sparse || n > K;
  }
  out->sparse = sparse;
  if (!sparse) return;
  out->positions.resize(total);
  const kernels::IndexKeyView keys{
      .base = static_cast<const uint8_t*>(kv.data) +
              (int64_t{layer} * kv.block_size * kv.row_width + kv.latent_width()) *
                  KvDTypeBytes(kv.dtype),
      .block_stride = kv.ElementsPerBlock() * KvDTypeBytes(kv.dtype),
      .row_stride = int64_t{kv.row_width} * KvDTypeBytes(kv.dtype),
      .block_size = kv.block_size};
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n = b.token_pos[t] + 1;
    int32_t* list = &out->positions[out->offsets[t]];
    if (n <= K) {
      std::iota(list, list + n, 0);
      continue;
    }
    scores_.resize(n);
    kernels::IndexScores({.num_heads = H,
                          .head_dim = D,
                          .q = &q8_[t * H * D],
                          .weights = &head_weights_[t * H],
                          .keys = keys,
                          .blocks = b.token_blocks[t],
                          .num_positions = n,
                          .scores = scores_.data()},
                         pool_);
    kernels::SelectTopK(scores_.data(), n, K, list);
  }
  out->lists.resize(T);
  for (int64_t t = 0; t < T; ++t) out->lists[t] = &out->positions[out->offsets[t]];
}

}  // namespace epserve
