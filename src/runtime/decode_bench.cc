#include "runtime/decode_bench.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <string>

#include "model/model.h"

namespace epserve {

namespace {

double MlpBytes(const MlpWeights& m) { return m.empty() ? 0 : m.gate.Bytes() + m.up.Bytes() + m.down.Bytes(); }

// Bytes of every weight a decode step reads regardless of routing.
double DenseBytes(const ModelWeights& w) {
  double b = w.lm_head.Bytes();
  for (const auto& l : w.layers) {
    const auto& a = l.attn;
    for (const WeightView* v : {&a.q_a, &a.q_b, &a.q, &a.kv_a, &a.kv_b, &a.o})
      if (!v->empty()) b += v->Bytes();
    b += MlpBytes(l.dense);
    if (l.moe) b += l.moe->router.Bytes() + MlpBytes(l.moe->shared);
  }
  return b;
}

}  // namespace

StatusOr<std::vector<DecodeBenchRow>> RunDecodeBench(const LoadedModel& lm, ThreadPool& pool,
                                                     const DecodeBenchOptions& opt) {
  const ModelConfig& c = lm.config;
  const ModelWeights& w = *lm.weights;
  if (opt.decode_steps < 1)
    return Status::InvalidArgument("bench decode: --steps must be at least 1, got " + std::to_string(opt.decode_steps));
  const double dense = DenseBytes(w);
  std::vector<DecodeBenchRow> rows;
  for (int batch : opt.batches) {
    Model model(c, w, pool);
    // Distinct experts per MoE layer in the current step.
    std::vector<std::set<int>> touched(c.num_hidden_layers);
    model.SetRouteObserver([&](const RouteEvent& ev) {
      for (int64_t i = 0; i < ev.num_tokens * ev.top_k; ++i) touched[ev.layer].insert(ev.expert_ids[i]);
    });
    LatentKvCache cache(c.num_hidden_layers, c.kv_a_dim(), batch, opt.prompt_len + opt.decode_steps + 1);
    ForwardBatch fb;
    for (int s = 0; s < batch; ++s) {
      std::vector<int32_t> p(opt.prompt_len);
      for (int i = 0; i < opt.prompt_len; ++i) p[i] = (s * 7919 + i * 104729) % c.vocab_size;
      fb.chunks.push_back({s, p});
    }
    std::vector<float> logits(static_cast<size_t>(batch) * c.vocab_size);
    RETURN_IF_ERROR(model.Forward(fb, cache, logits.data()));  // prefill
    double seconds = 0, weight_bytes = 0, kv_bytes = 0, experts = 0;
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
        fb.chunks[s].tokens.assign(1, best);
        kv_step += static_cast<double>(cache.length(s) + 1) * c.kv_a_dim() * sizeof(float) * c.num_hidden_layers;
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
        for (int e : touched[l]) weight_bytes += MlpBytes(w.layers[l].moe->experts[e]);
        experts += static_cast<double>(touched[l].size());
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
