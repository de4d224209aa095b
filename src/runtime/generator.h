// Batched generation: one prefill step over all prompts (chunks of different lengths), then
// decode steps where every sequence adds one token. Keeps the logits that chose each token
// when asked (for --logits-out and reference tests).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "base/status.h"
#include "model/model.h"
#include "runtime/sampler.h"

namespace epserve {

struct GenerateOptions {
  int max_tokens = 16;
  SamplingOptions sampling;
  bool keep_logits = false;
  // Expert parallelism: every rank must take part in every step's collectives, so a DP group
  // with no prompts still runs max_tokens (empty) steps instead of returning at once.
  bool step_when_empty = false;
  // Sequence ids of the prompts (traces, routing keys); empty: 0, 1, 2, ...
  std::vector<uint32_t> sequence_ids;
  // Called before each step (0 = prefill); may be null.
  std::function<void(int step)> on_step;
};

struct GenerateResult {
  std::vector<std::vector<int32_t>> tokens;  // generated ids per sequence
  std::vector<float> logits;                 // [sequences, max_tokens, vocab] when kept
  int64_t prefill_tokens = 0, decode_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
};

StatusOr<GenerateResult> Generate(Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                  const GenerateOptions& options);

}  // namespace epserve
