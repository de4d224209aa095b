#include "runtime/generator.h"

#include <chrono>
#include <cstring>

namespace epserve {

StatusOr<GenerateResult> Generate(Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                  const GenerateOptions& opt) {
  const ModelConfig& c = model.config();
  const int S = static_cast<int>(prompts.size());
  if (opt.max_tokens < 1) return Status::InvalidArgument("--max-tokens must be >= 1");
  size_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) return Status::InvalidArgument("prompt " + std::to_string(i) + " is empty");
    longest = std::max(longest, prompts[i].size());
  }
  GenerateResult res;
  res.tokens.resize(S);
  if (S == 0 && !opt.step_when_empty) return res;
  const int64_t capacity = static_cast<int64_t>(longest) + opt.max_tokens;
  if (capacity > c.max_position_embeddings)
    return Status::InvalidArgument("prompt + max tokens = " + std::to_string(capacity) + " exceeds max_position_embeddings " +
                                   std::to_string(c.max_position_embeddings));
  LatentKvCache cache(c.num_hidden_layers, c.kv_a_dim(), std::max(S, 1), capacity);
  std::vector<Sampler> samplers;
  for (int s = 0; s < S; ++s) {
    SamplingOptions so = opt.sampling;
    so.seed += static_cast<uint64_t>(s);
    samplers.emplace_back(so);
  }
  const int V = c.vocab_size;
  if (opt.keep_logits) res.logits.assign(static_cast<size_t>(S) * opt.max_tokens * V, 0.0f);
  std::vector<float> logits(static_cast<size_t>(S) * V);
  ForwardBatch batch;
  for (int s = 0; s < S; ++s) {
    batch.chunks.push_back({.slot = s, .tokens = prompts[s],
                            .sequence_id = opt.sequence_ids.empty() ? static_cast<uint32_t>(s) : opt.sequence_ids[s]});
    res.prefill_tokens += static_cast<int64_t>(prompts[s].size());
  }
  using Clock = std::chrono::steady_clock;
  for (int step = 0; step < opt.max_tokens; ++step) {
    if (opt.on_step) opt.on_step(step);
    auto t0 = Clock::now();
    RETURN_IF_ERROR(model.Forward(batch, cache, logits.data()));
    double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    (step == 0 ? res.prefill_seconds : res.decode_seconds) += dt;
    if (step > 0) res.decode_tokens += S;
    for (int s = 0; s < S; ++s) {
      const float* l = &logits[static_cast<size_t>(s) * V];
      if (opt.keep_logits) std::memcpy(&res.logits[(static_cast<size_t>(s) * opt.max_tokens + step) * V], l, V * sizeof(float));
      int32_t tok = samplers[s].Sample(l, V);
      res.tokens[s].push_back(tok);
      batch.chunks[s].tokens.assign(1, tok);
    }
  }
  return res;
}

}  // namespace epserve
