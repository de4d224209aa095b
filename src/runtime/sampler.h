// Token sampling: greedy (temperature 0) or temperature + top-k + nucleus (top-p) with a seeded RNG.
// Deterministic for a given seed. Thread safety: one sampler per sequence.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace epserve {

struct SamplingOptions {
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;        // keep the smallest set of tokens whose probability >= top_p
  int top_k = 0;             // keep at most the k most likely tokens first (0: all)
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options) : opt_(options), rng_(options.seed) {}
  int32_t Sample(const float* logits, int vocab);

 private:
  SamplingOptions opt_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> probs_;
};

// Index of the largest logit; ties to the lower id.
int32_t ArgMax(const float* logits, int vocab);

}  // namespace epserve
