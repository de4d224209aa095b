#include "runtime/prefill_bench.h"

#include <chrono>
#include <cmath>
#include <string>

#include "model/kv_cache.h"
#include "runtime/weight_work.h"

namespace epserve {

namespace {

// Multiply-adds of the projections one token goes through: every dense weight but the LM head
// (the last token's is one row) and top-k routed experts per MoE layer.
double MacsPerToken(const ModelConfig& c, const ModelWeights& w) {
  double sum = DenseWork(w, WeightElements) - WeightElements(w.lm_head);
  for (const auto& l : w.layers)
    if (l.moe && !l.moe->experts.empty())
      sum += c.num_experts_per_tok * MlpWork(l.moe->experts[0], WeightElements);
  return sum;
}

}  // namespace

StatusOr<PrefillBenchResult> RunPrefillBench(const LoadedModel& lm, ThreadPool& pool,
                                             const PrefillBenchOptions& opt) {
  const ModelConfig& c = lm.config;
  if (opt.tokens < 1)
    return Status::InvalidArgument("bench prefill: --tokens must be at least 1, got " +
                                   std::to_string(opt.tokens));
  if (opt.tokens + 1 > c.max_position_embeddings)
    return Status::InvalidArgument(
        "bench prefill: --tokens " + std::to_string(opt.tokens) + " exceeds the model's context (" +
        std::to_string(c.max_position_embeddings) + " positions, one kept free)");
  if (opt.repeats < 1)
    return Status::InvalidArgument("bench prefill: --repeats must be at least 1, got " +
                                   std::to_string(opt.repeats));
  if (opt.step_tokens < 0)
    return Status::InvalidArgument("bench prefill: --step-tokens must not be negative");
  const int step = opt.step_tokens > 0 ? opt.step_tokens : opt.tokens;
  Model model(c, *lm.weights, pool);
  model.SetCompute(opt.compute);
  LatentKvCache cache = LatentKvCache::For(c, c.num_hidden_layers, 1, opt.tokens + 1);
  std::vector<int32_t> prompt(opt.tokens);
  for (int i = 0; i < opt.tokens; ++i)
    prompt[i] = static_cast<int32_t>((i * 104729LL) % c.vocab_size);
  std::vector<float> logits(c.vocab_size);
  auto prefill = [&]() -> Status {
    cache.set_length(0, 0);
    for (int begin = 0; begin < opt.tokens; begin += step) {
      const int end = std::min(opt.tokens, begin + step);
      ForwardBatch fb;
      fb.chunks.push_back({0, std::vector<int32_t>(prompt.begin() + begin, prompt.begin() + end)});
      RETURN_IF_ERROR(model.Forward(fb, cache, logits.data()));
    }
    return Status::Ok();
  };
  RETURN_IF_ERROR(prefill());  // warm-up
  PrefillBenchResult r;
  const StepTimes before = model.times();
  for (int rep = 0; rep < opt.repeats; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(prefill());
    r.seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  r.phase_ms = model.times().Delta(before, 1e3 / opt.repeats);
  double sum = 0, sum2 = 0;
  for (double s : r.seconds) {
    const double tps = opt.tokens / s;
    sum += tps;
    sum2 += tps * tps;
  }
  const double n = static_cast<double>(r.seconds.size());
  r.mean_tokens_per_s = sum / n;
  r.stddev_tokens_per_s = n > 1 ? std::sqrt(std::max(0.0, (sum2 - sum * sum / n) / (n - 1))) : 0;
  r.matmul_flops = 2.0 * MacsPerToken(c, *lm.weights) * opt.tokens;
  return r;
}

}  // namespace epserve
