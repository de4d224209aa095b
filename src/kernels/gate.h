// Top-k expert selection for DeepSeek-family routers (SPEC §2), one token at a time.
#pragma once

#include <cstdint>

namespace epserve::kernels {

enum class ScoringFunc { kSigmoid, kSoftmax };
enum class TopkMethod { kNoauxTc, kGreedy, kGroupLimitedGreedy };

struct GateOptions {
  ScoringFunc scoring = ScoringFunc::kSigmoid;
  TopkMethod method = TopkMethod::kNoauxTc;
  int num_experts = 0;
  int top_k = 0;
  int num_groups = 1;
  int topk_groups = 1;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
};

// REQUIRES: logits has num_experts values; bias (noaux_tc only, else may be null) too;
// scratch has 2 * num_experts floats. Writes top_k expert ids and their weights, ordered by
// decreasing selection score. Deterministic: ties go to the lower expert id.
void GateTopK(const GateOptions& opt, const float* logits, const float* bias, float* scratch,
              int32_t* expert_ids, float* weights);

}  // namespace epserve::kernels
