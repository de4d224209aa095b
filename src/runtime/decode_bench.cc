#include "runtime/decode_bench.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <string>

#include "model/model.h"
#include "runtime/weight_work.h"

namespace epserve {

double DecodeStepBandwidthMs(const DecodeBenchRow& r, double read_gbps) {
  return (r.weight_bytes_per_step + r.kv_bytes_per_step) / (read_gbps * 1e9) * 1e3;
}

double DecodeStepFloorMs(const DecodeBenchRow& r, double read_gbps, double peak_gflops) {
  auto floor_s = [&](double bytes, double flops) { return std::max(bytes / (read_gbps * 1e9), flops / (peak_gflops * 1e9)); };
  return 1e3 * (floor_s(r.dense_bytes_per_step, r.dense_flops_per_step) +
                floor_s(r.routed_bytes_per_step, r.routed_flops_per_step) +
                floor_s(r.kv_bytes_per_step, r.attention_flops_per_step));
}

StatusOr<std::vector<DecodeBenchRow>> RunDecodeBench(const LoadedModel& lm, ThreadPool& pool,
                                                     const DecodeBenchOptions& opt) {
  const ModelConfig& c = lm.config;
  const ModelWeights& w = *lm.weights;
  if (opt.decode_steps < 1)
    return Status::InvalidArgument("bench decode: --steps must be at least 1, got " + std::to_string(opt.decode_steps));
  if (opt.prompt_len < 1) return Status::InvalidArgument("bench decode: --prompt-len must be at least 1");
  for (int b : opt.batches)
    if (b < 1) return Status::InvalidArgument("bench decode: --batches must be at least 1, got " + std::to_string(b));
  if (opt.prompt_len + opt.decode_steps + 1 > c.max_position_embeddings)
    return Status::InvalidArgument("bench decode: --prompt-len + --steps exceed the model's context");
  const double dense = DenseWork(w, WeightBytes);
  const double dense_macs = DenseWork(w, WeightElements);
  // Attention per token, layer and head, per cached position: a score over the latent and
  // rotary parts, then the latent value.
  const double attn_macs_per_position =
      static_cast<double>(2 * c.kv_lora_rank + c.qk_rope_head_dim) * c.num_attention_heads * c.num_hidden_layers;
  std::vector<DecodeBenchRow> rows;
  for (int batch : opt.batches) {
    Model model(c, w, pool);
    model.SetCompute(opt.compute);
    // Distinct experts per MoE layer in the current step.
    std::vector<std::set<int>> touched(c.num_hidden_layers);
    model.SetRouteObserver([&](const RouteEvent& ev) {
      for (int64_t i = 0; i < ev.num_tokens * ev.top_k; ++i) touched[ev.layer].insert(ev.expert_ids[i]);
    });
    LatentKvCache cache =
        LatentKvCache::For(c, c.num_hidden_layers, batch, opt.prompt_len + opt.decode_steps + 1);
    ForwardBatch fb;
    for (int s = 0; s < batch; ++s) {
      std::vector<int32_t> p(opt.prompt_len);
      for (int i = 0; i < opt.prompt_len; ++i)
        p[i] = opt.same_tokens ? 0 : (s * 7919 + i * 104729) % c.vocab_size;
      fb.chunks.push_back({s, p});
    }
    std::vector<float> logits(static_cast<size_t>(batch) * c.vocab_size);
    RETURN_IF_ERROR(model.Forward(fb, cache, logits.data()));  // prefill
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
        attn_macs += static_cast<double>(cache.length(s) + 1) * attn_macs_per_position;
      }
      kv_bytes += kv_step;
      for (auto& t : touched) t.clear();
      auto t0 = std::chrono::steady_clock::now();
      RETURN_IF_ERROR(model.Forward(fb, cache, logits.data()));
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
