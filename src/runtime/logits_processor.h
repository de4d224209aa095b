// What a request asks to be done to a logits row before a token is drawn from it: OpenAI's
// logit_bias, presence and frequency penalties, the repetition penalty (HF / vLLM semantics),
// min_tokens (stop ids held back until that many tokens were generated), and a token
// constraint (structured outputs: a grammar that says which tokens may come next).
// The engine keeps one LogitsProcessor per request; logprobs are reported from the model's
// raw row, as vLLM and OpenAI do. Thread safety: one per request, used by the engine's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/status.h"

namespace epserve {

// A request's adjustments of the logits (all off by default).
struct LogitsAdjustments {
  float presence_penalty = 0.0f;    // [-2, 2]: minus this once for every token already generated
  float frequency_penalty = 0.0f;   // [-2, 2]: minus this times the token's generated count
  float repetition_penalty = 1.0f;  // > 0: a seen token's (prompt or output) logit l becomes
                                    // l / r if l > 0, l * r otherwise; 1: off
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to those tokens' logits
  int min_tokens = 0;  // stop ids cannot be drawn before this many tokens were generated
  bool any() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f ||
           !logit_bias.empty() || min_tokens > 0;
  }
};

// Which tokens may come next (a grammar's matcher, for one request).
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits of the tokens that may not come next to -inf. `remaining` is how many
  // tokens the request may still generate (this one included): a constraint may use it to
  // close its structure in time instead of being cut off.
  virtual void Restrict(float* logits, int vocab, int remaining) = 0;
  // The token drawn (one Restrict allowed). An error ends the request.
  virtual Status Accept(int32_t token) = 0;
  // The constrained output is complete (a stop token may end it now): when the request's other
  // adjustments exclude every token the constraint allows (ignore_eos bans the stop ids), the
  // engine ends the request with "stop" instead of an error.
  virtual bool Complete() const { return false; }
};

// Makes a request's constraint from its spec (EngineRequest::constraint; the format is the
// factory's: runtime/grammar_constraint.h). `stop_ids` are the request's stop tokens.
using ConstraintFactory = std::function<StatusOr<std::unique_ptr<TokenConstraint>>(
    const std::string& spec, const std::vector<int32_t>& stop_ids)>;

class LogitsProcessor {
 public:
  LogitsProcessor() = default;
  LogitsProcessor(LogitsAdjustments adjustments, const std::vector<int32_t>& prompt,
                  std::vector<int32_t> stop_ids, std::unique_ptr<TokenConstraint> constraint);
  // Whether Apply changes anything (else the engine samples from the raw row).
  bool active() const { return active_; }
  // The row to sample from: `row` adjusted into an internal buffer. `generated`: tokens the
  // request generated so far; `remaining`: tokens it may still generate.
  const float* Apply(const float* row, int vocab, int generated, int remaining);
  // Records the drawn token (counts for the penalties; the constraint's state).
  Status Accept(int32_t token);
  // The request's constraint says its output is complete (TokenConstraint::Complete).
  bool ConstraintComplete() const { return constraint_ != nullptr && constraint_->Complete(); }

 private:
  LogitsAdjustments adj_;
  std::vector<int32_t> stop_ids_;
  std::unique_ptr<TokenConstraint> constraint_;
  std::unordered_map<int32_t, int> counts_;  // generated tokens
  std::unordered_set<int32_t> seen_;         // prompt and generated (repetition penalty)
  std::vector<float> row_;
  bool active_ = false;
};

}  // namespace epserve
