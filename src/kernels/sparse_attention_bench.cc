#include "kernels/sparse_attention_bench.h"

#include <algorithm>
#include <cstring>

#include "base/timer.h"
#include "kernels/kernel_bench_cases.h"
#include "kernels/matmul.h"
#include "kernels/mla_attention.h"
#include "kernels/sparse_index.h"
#include "tensor/dtype.h"

namespace epserve::kernels {

namespace {

constexpr int64_t kBlock = 64;  // positions per cache block
constexpr int kKeyBytes = kIndexBlock + 4;

// B sequences of n positions in rows `width` bf16 elements wide; sequence b's blocks are
// [b * blocks, (b + 1) * blocks). The first `latent` elements of a row are random values, the
// rest random FP8 index keys with a scale of 1/64.
struct Cache {
  std::vector<uint16_t> rows;
  std::vector<int32_t> table;
  int64_t blocks_per_seq = 0, width = 0;
  Cache(int batch, int64_t n, int64_t width_, int latent, uint64_t seed) : width(width_) {
    blocks_per_seq = (n + kBlock - 1) / kBlock;
    const int64_t total = batch * blocks_per_seq * kBlock;
    rows.resize(total * width);
    const std::vector<float> v = BenchVector(total * latent, seed);
    for (int64_t r = 0; r < total; ++r) {
      for (int i = 0; i < latent; ++i) rows[r * width + i] = F32ToBf16(v[r * latent + i] * 0.5f);
      if (width == latent) continue;
      auto* key = reinterpret_cast<uint8_t*>(&rows[r * width + latent]);
      for (int i = 0; i < kIndexBlock; ++i)
        key[i] = F32ToFp8E4M3(v[(r * latent + i * 3) % (total * latent)] * 16);
      const float scale = 1.0f / 64;
      std::memcpy(key + kIndexBlock, &scale, 4);
    }
    for (int64_t b = 0; b < batch * blocks_per_seq; ++b) table.push_back(static_cast<int32_t>(b));
  }
  const int32_t* Table(int b) const { return &table[b * blocks_per_seq]; }
};

template <typename F>
double Best(int repeats, const F& f) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = NowSeconds();
    f();
    best = std::min(best, NowSeconds() - t0);
  }
  return best;
}

}  // namespace

std::vector<SparseAttentionBenchRow> RunSparseAttentionBench(const SparseAttentionBenchOptions& o,
                                                             ThreadPool& pool) {
  const int B = o.batch, H = o.heads, L = o.kv_lora_rank, R = o.rope_dim;
  const int HI = o.index_heads, D = o.index_dim;
  const int latent = L + R, key_elems = kKeyBytes / 2;
  const std::vector<float> q_abs = BenchVector(int64_t{B} * H * L, 1),
                           q_pe = BenchVector(int64_t{B} * H * R, 2),
                           x = BenchVector(int64_t{B} * o.hidden, 3),
                           q_lat = BenchVector(int64_t{B} * o.q_lora_rank, 4);
  // As released: wq_b and wk FP8, weights_proj BF16.
  const BenchWeight wq_b = MakeBenchWeight(DType::kF8E4M3, int64_t{HI} * D, o.q_lora_rank, 5),
                    wk = MakeBenchWeight(DType::kF8E4M3, D, o.hidden, 6),
                    wp = MakeBenchWeight(DType::kBF16, HI, o.hidden, 7);
  const double weight_bytes =
      static_cast<double>(wq_b.view.Bytes() + wk.view.Bytes() + wp.view.Bytes());
  std::vector<float> out(int64_t{B} * H * L),
      scratch(pool.num_threads() * MlaScratchFloats(latent));
  std::vector<float> q(int64_t{B} * HI * D), k(int64_t{B} * D), hw(int64_t{B} * HI);
  std::vector<uint8_t> q8(int64_t{B} * HI * D);
  // MLA over `cache` (its rows `cache.width` wide), one token per sequence at `pos`.
  auto attention = [&](const Cache& cache, const std::vector<const int32_t*>& tables,
                       const std::vector<int64_t>& pos) {
    return MlaAttentionArgs{.num_tokens = B,
                            .num_heads = H,
                            .kv_lora_rank = L,
                            .rope_dim = R,
                            .q_abs = q_abs.data(),
                            .q_pe = q_pe.data(),
                            .cache = {.base = cache.rows.data(),
                                      .block_stride = kBlock * cache.width,
                                      .block_size = kBlock,
                                      .type = CacheType::kBF16,
                                      .row_stride = cache.width},
                            .token_blocks = tables.data(),
                            .token_pos = pos.data(),
                            .softmax_scale = 0.07f,
                            .out = out.data(),
                            .scratch = scratch.data()};
  };
  std::vector<SparseAttentionBenchRow> rows;
  for (int64_t n : o.contexts) {
    SparseAttentionBenchRow row{.context = n};
    const int64_t K = std::min<int64_t>(o.index_topk, n);
    std::vector<int64_t> pos(B, n - 1);
    {  // V3: dense MLA over 576-wide rows.
      Cache cache(B, n, latent, latent, 11);
      std::vector<const int32_t*> tables;
      for (int b = 0; b < B; ++b) tables.push_back(cache.Table(b));
      const MlaAttentionArgs args = attention(cache, tables, pos);
      row.dense_seconds = Best(o.repeats, [&] { MlaAttention(args, pool); });
      row.dense_bytes = static_cast<double>(B) * n * latent * 2;
      row.dense_flops = 2.0 * B * H * n * (latent + L);
    }
    {  // V3.2: the indexer, then MLA over the chosen positions of 642-wide rows.
      const int64_t width = latent + key_elems;
      Cache cache(B, n, width, latent, 12);
      std::vector<const int32_t*> tables;
      for (int b = 0; b < B; ++b) tables.push_back(cache.Table(b));
      std::vector<int32_t> selected(B * K), counts(B, static_cast<int32_t>(K));
      std::vector<float> scores(n);
      std::vector<const int32_t*> lists;
      for (int b = 0; b < B; ++b) lists.push_back(&selected[b * K]);
      const IndexKeyView keys{
          .base = reinterpret_cast<const uint8_t*>(cache.rows.data()) + latent * 2,
          .block_stride = kBlock * width * 2,
          .row_stride = width * 2,
          .block_size = kBlock};
      auto indexer = [&] {
        const MatMulArgs from_x[] = {{.x = x.data(), .num_rows = B, .w = wk.view, .y = k.data()},
                                     {.x = x.data(), .num_rows = B, .w = wp.view, .y = hw.data()}};
        MatMulBatch(from_x, pool);
        MatMul({.x = q_lat.data(), .num_rows = B, .w = wq_b.view, .y = q.data()}, pool);
        for (int64_t h = 0; h < int64_t{B} * HI; ++h) {
          HadamardRotate(&q[h * D], D);
          hw[h] *= QuantizeIndexFp8(&q[h * D], D, true, &q8[h * D]);
        }
        for (int b = 0; b < B; ++b) {
          IndexScores({.num_heads = HI,
                       .head_dim = D,
                       .q = &q8[int64_t{b} * HI * D],
                       .weights = &hw[int64_t{b} * HI],
                       .keys = keys,
                       .blocks = tables[b],
                       .num_positions = n,
                       .scores = scores.data()},
                      pool);
          SelectTopK(scores.data(), n, K, &selected[b * K]);
        }
      };
      MlaAttentionArgs args = attention(cache, tables, pos);
      args.token_selected = lists.data();
      args.token_num_selected = counts.data();
      row.indexer_seconds = Best(o.repeats, indexer);
      row.sparse_seconds = Best(o.repeats, [&] {
        indexer();
        MlaAttention(args, pool);
      });
      row.sparse_bytes = weight_bytes + static_cast<double>(B) * n * kKeyBytes +
                         static_cast<double>(B) * K * latent * 2;
      row.sparse_flops = 2.0 * B *
                             (static_cast<double>(HI) * D * (o.q_lora_rank + n) +
                              static_cast<double>(D + HI) * o.hidden) +
                         2.0 * B * H * K * (latent + L);
    }
    rows.push_back(row);
  }
  return rows;
}

}  // namespace epserve::kernels
