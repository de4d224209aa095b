// The cost of structured outputs in the engine: decode steps of a batch of sampled requests
// with and without a JSON-schema constraint, in the same run (rounds alternate, so a noisy
// machine hurts both alike). `bench grammar --model DIR` prints it (docs/grammar.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model.h"
#include "text/tokenizer.h"

namespace epserve {

struct ConstrainedBenchOptions {
  int batch = 8;                     // requests decoding together
  int max_tokens = 128;              // each request's output
  int rounds = 3;                    // each round runs both modes
  std::vector<std::string> schemas;  // JSON Schema texts; request i uses schemas[i % size]
};

struct ConstrainedBenchResult {
  // Decode steps (every step after the prompts' prefill), over all rounds: seconds per step
  // and per generated token (constrained requests end when their JSON does, so their batches
  // thin out sooner; the per-token time compares like with like).
  double free_step_s = 0, constrained_step_s = 0;
  double free_token_s = 0, constrained_token_s = 0;
  int64_t free_steps = 0, constrained_steps = 0;
  int64_t free_tokens = 0, constrained_tokens = 0;
};

// `tokenizer` must be the model's (same vocabulary).
StatusOr<ConstrainedBenchResult> RunConstrainedBench(Model& model,
                                                     std::shared_ptr<const text::Tokenizer> tok,
                                                     const ConstrainedBenchOptions& options);

}  // namespace epserve
