#include "runtime/decode_bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <string>

#include "model/model.h"
#include "runtime/weight_work.h"
#include "tensor/dtype.h"

namespace epserve {

namespace {

// Writes positions [0, n) of every slot and layer with random latent rows (values in
// [-0.5, 0.5)) and, with sparse attention, random FP8 indexer keys (scale 1/64), as a prefill
// of n tokens would leave them in shape (not in content: a benchmark of the step's time).
void FillCacheAtRandom(const ModelConfig& c, LatentKvCache& cache, int64_t n) {
  const KvBlocks& kv = cache.blocks();
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&] {  // xorshift64*, uniform in [-0.5, 0.5)
    state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
    return static_cast<float>((state * 2685821657736338717ull) >> 40) / (1 << 24) - 0.5f;
  };
  std::vector<float> row(kv.latent_width());
  const float scale = 1.0f / 64;
  for (int s = 0; s < cache.num_slots(); ++s) {
    const int32_t block = cache.table(s)[0];
    for (int l = 0; l < kv.num_layers; ++l)
      for (int64_t p = 0; p < n; ++p) {
        for (float& v : row) v = next();
        kv.WriteRow(block, l, p, row.data());
        if (kv.index_bytes == 0) continue;
        uint8_t* key = kv.IndexKey(block, l, p);
        for (int i = 0; i < c.sparse.index_head_dim; ++i) key[i] = F32ToFp8E4M3(next() * 32);
        std::memcpy(key + c.sparse.index_head_dim, &scale, sizeof(scale));
      }
    cache.set_length(s, n);
  }
}

}  // namespace

double DecodeStepBandwidthMs(const DecodeBenchRow& r, double read_gbps) {
  return (r.weight_bytes_per_step + r.kv_bytes_per_step) / (read_gbps * 1e9) * 1e3;
}

double DecodeStepFloorMs(const DecodeBenchRow& r, double read_gbps, double peak_gflops) {
  auto floor_s = [&](double bytes, double flops) {
    return std::max(bytes / (read_gbps * 1e9), flops / (peak_gflops * 1e9));
  };
  return 1e3 * (floor_s(r.dense_bytes_per_step, r.dense_flops_per_step) +
                floor_s(r.routed_bytes_per_step, r.routed_flops_per_step) +
                floor_s(r.kv_bytes_per_step, r.attention_flops_per_step));
}

StatusOr<std::vector<DecodeBenchRow>> RunDecodeBench(const LoadedModel& lm, ThreadPool& pool,
                                                     const DecodeBenchOptions& opt) {
  const ModelConfig& c = lm.config;
  const ModelWeights& w = *lm.weights;
  if (opt.decode_steps < 1)
    return Status::InvalidArgument("bench decode: --steps must be at least 1, got " +
                                   std::to_string(opt.decode_steps));
  if (opt.prompt_len < 1)
    return Status::InvalidArgument("bench decode: --prompt-len must be at least 1");
  for (int b : opt.batches)
    if (b < 1)
      return Status::InvalidArgument("bench decode: --batches must be at least 1, got " +
                                     std::to_string(b));
  if (opt.context < 0) return Status::InvalidArgument("bench decode: --context must be at least 1");
  const int64_t start = opt.context > 0 ? opt.context + 1 : opt.prompt_len;  // cached at step 1
  if (start + opt.decode_steps + 1 > c.max_position_embeddings)
    return Status::InvalidArgument(std::string("bench decode: ") +
                                   (opt.context > 0 ? "--context" : "--prompt-len") +
                                   " + --steps exceed the model's context (" +
                                   std::to_string(c.max_position_embeddings) + " positions)");
  const double dense = DenseWork(w, WeightBytes);
  const double dense_macs = DenseWork(w, WeightElements);
  // Attention per token, layer and head, per attended position: a score over the latent and
  // rotary parts, then the latent value. With sparse attention the indexer also scores every
  // cached position (index_n_heads x index_head_dim), and MLA attends the index_topk chosen.
  const double attn_macs_per_position =
      static_cast<double>(2 * c.kv_lora_rank + c.qk_rope_head_dim) * c.num_attention_heads *
      c.num_hidden_layers;
  const double index_macs_per_position =
      static_cast<double>(c.sparse.index_n_heads) * c.sparse.index_head_dim * c.num_hidden_layers;
  std::vector<DecodeBenchRow> rows;
  for (int batch : opt.batches) {
    Model model(c, w, pool);
    model.SetCompute(opt.compute);
    // Distinct experts per MoE layer in the current step.
    std::vector<std::set<int>> touched(c.num_hidden_layers);
    model.SetRouteObserver([&](const RouteEvent& ev) {
      for (int64_t i = 0; i < ev.num_tokens * ev.top_k; ++i)
        touched[ev.layer].insert(ev.expert_ids[i]);
    });
    LatentKvCache cache =
        LatentKvCache::For(c, c.num_hidden_layers, batch, start + opt.decode_steps + 1);
    const int prompt = opt.context > 0 ? 1 : opt.prompt_len;
    if (opt.context > 0) FillCacheAtRandom(c, cache, opt.context);
    ForwardBatch fb;
    for (int s = 0; s < batch; ++s) {
      std::vector<int32_t> p(prompt);
      for (int i = 0; i < prompt; ++i)
        p[i] = opt.same_tokens ? 0 : (s * 7919 + i * 104729) % c.vocab_size;
      fb.chunks.push_back({s, p});
    }
    std::vector<float> logits(static_cast<size_t>(batch) * c.vocab_size);
    RETURN_IF_ERROR(model.Forward(fb, cache, logits.data()));  // prefill (or the untimed step)
    double seconds = 0, weight_bytes = 0, kv_bytes = 0, experts = 0, routed_macs = 0, attn_macs = 0;
    std::vector<std::pair<double, double>> steps;  // (seconds, bytes) of each step
    int moe_layers = 0;
    for (int l = 0; l < c.num_hidden_layers; ++l) moe_layers += c.IsMoeLayer(l) ? 1 : 0;
    const StepTimes before = model.times();
    for (int step = 0; step < opt.decode_steps; ++step) {
      double kv_step = 0;
      for (int s = 0; s < batch; ++s) {
        const float* l = &logits[static_cast<size_t>(s) * c.vocab_size];
        int32_t best = 0;
        for (int v = 1; v < c.vocab_size; ++v)
          if (l[v] > l[best]) best = v;
        fb.chunks[s].tokens.assign(1, opt.same_tokens ? 0 : best);
        // Latent rows attended (with sparse attention: the index_topk chosen, and every
        // position's indexer key).
        const int64_t n = cache.length(s) + 1;
        const int64_t rows = c.sparse.enabled() ? std::min<int64_t>(n, c.sparse.index_topk) : n;
        kv_step += (static_cast<double>(rows) * c.kv_a_dim() * sizeof(float) +
                    static_cast<double>(n) * IndexKeyBytes(c)) *
                   c.num_hidden_layers;
        attn_macs += static_cast<double>(rows) * attn_macs_per_position +
                     (c.sparse.enabled() ? static_cast<double>(n) * index_macs_per_position : 0);
      }
      kv_bytes += kv_step;
      for (auto& t : touched) t.clear();
      auto t0 = std::chrono::steady_clock::now();
      RETURN_IF_ERROR(model.Forward(fb, cache, logits.data()));
      const double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      seconds += dt;
      const double weights_before = weight_bytes;
      weight_bytes += dense;
      for (int l = 0; l < c.num_hidden_layers; ++l) {
        for (int e : touched[l]) weight_bytes += MlpWork(w.layers[l].moe->experts[e], WeightBytes);
        experts += static_cast<double>(touched[l].size());
        if (!touched[l].empty())  // every token takes top_k experts of the same shape
          routed_macs += static_cast<double>(batch) * c.num_experts_per_tok *
                         MlpWork(w.layers[l].moe->experts[*touched[l].begin()], WeightElements);
      }
      steps.emplace_back(dt, weight_bytes - weights_before + kv_step);
    }
    DecodeBenchRow r;
    r.batch = batch;
    r.phase_ms = model.times().Delta(before, 1e3 / opt.decode_steps);
    r.step_ms = seconds / opt.decode_steps * 1e3;
    r.tokens_per_s = batch * opt.decode_steps / seconds;
    r.weight_bytes_per_step = weight_bytes / opt.decode_steps;
    r.kv_bytes_per_step = kv_bytes / opt.decode_steps;
    r.experts_touched_per_layer = moe_layers ? experts / opt.decode_steps / moe_layers : 0;
    r.achieved_gbps = (weight_bytes + kv_bytes) / seconds / 1e9;
    r.dense_bytes_per_step = dense;
    r.routed_bytes_per_step = r.weight_bytes_per_step - dense;
    r.dense_flops_per_step = 2.0 * dense_macs * batch;
    r.routed_flops_per_step = 2.0 * routed_macs / opt.decode_steps;
    r.attention_flops_per_step = 2.0 * attn_macs / opt.decode_steps;
    // The median step by time, and its own bytes / time.
    std::sort(steps.begin(), steps.end());
    const auto& median = steps[steps.size() / 2];
    r.median_step_ms = median.first * 1e3;
    r.median_step_gbps = median.second / median.first / 1e9;
    rows.push_back(r);
  }
  return rows;
}

}  // namespace epserve
