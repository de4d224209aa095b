// Token sampling: greedy (temperature 0) or temperature + top-k + min-p + nucleus (top-p) with a
// seeded RNG. Logits of -inf (masked tokens) are never drawn. Deterministic for a given seed.
// Thread safety: one sampler per sequence.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace epserve {

struct SamplingOptions {
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;        // keep the smallest set of tokens whose probability >= top_p
  int top_k = 0;             // keep at most the k most likely tokens first (0: all)
  float min_p = 0.0f;        // then drop tokens less likely than min_p times the likeliest
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options) : opt_(options), rng_(options.seed) {}
  int32_t Sample(const float* logits, int vocab);
  // Moves past the draws of `n` Sample calls (each non-greedy Sample draws exactly one value):
  // a resumed request continues its seeded sequence where it left off.
  void SkipDraws(int64_t n) {
    if (!greedy() && n > 0) rng_.discard(static_cast<unsigned long long>(n));
  }

  // Speculative decoding (docs/serving-engine.md, "MTP"):
  bool greedy() const { return opt_.temperature <= 0.0f; }
  // The distribution Sample draws from, dense over the vocabulary: temperature, top-k and
  // top-p applied, renormalized over the kept tokens, zero elsewhere. Greedy: one-hot at the
  // argmax.
  void Distribution(const float* logits, int vocab, std::vector<float>* p);
  // A draw from the weights w[0, vocab) (not necessarily normalized; their sum must be > 0).
  int32_t SampleFrom(const float* w, int vocab);
  // Speculative verification of a draft token d drawn from q (Leviathan et al. 2023): keeps d
  // with probability min(1, p(d) / q(d)), else draws from the residual max(0, p - q)
  // renormalized, where p = Distribution(logits); the token returned is then distributed as p
  // whatever q is. Greedy: keeps d iff it is the argmax (q unused), returns the argmax.
  int32_t VerifyDraft(const float* logits, int vocab, int32_t draft, const std::vector<float>& q,
                      bool* accepted);
  // A uniform draw from [0, 1).
  double Uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

 private:
  // The tokens Sample draws from: sorted by probability into probs_ (unnormalized weights),
  // the first `count` kept (top-k, then top-p); `sum` normalizes their weights, `mass` is the
  // normalized mass kept.
  struct Kept {
    size_t count = 0;
    double sum = 0.0, mass = 0.0;
  };
  Kept KeepNucleus(const float* logits, int vocab);

  SamplingOptions opt_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> probs_;
  std::vector<float> scratch_;
};

// Index of the largest logit; ties to the lower id.
int32_t ArgMax(const float* logits, int vocab);

}  // namespace epserve
