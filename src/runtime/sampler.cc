#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

namespace epserve {

int32_t ArgMax(const float* logits, int vocab) {
  int32_t best = 0;
  for (int i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

int32_t Sampler::Sample(const float* logits, int vocab) {
  if (opt_.temperature <= 0.0f) return ArgMax(logits, vocab);
  float mx = logits[ArgMax(logits, vocab)];
  probs_.resize(vocab);
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) {
    float p = std::exp((logits[i] - mx) / opt_.temperature);
    probs_[i] = {p, i};
    sum += p;
  }
  std::sort(probs_.begin(), probs_.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  // Nucleus: the shortest prefix whose mass reaches top_p.
  double cum = 0.0;
  size_t keep = 0;
  const size_t limit = opt_.top_k > 0 ? std::min<size_t>(opt_.top_k, probs_.size()) : probs_.size();
  if (limit < probs_.size()) {  // renormalise over the k kept
    sum = 0.0;
    for (size_t i = 0; i < limit; ++i) sum += probs_[i].first;
  }
  while (keep < limit) {
    cum += probs_[keep++].first / sum;
    if (cum >= opt_.top_p) break;
  }
  double r = std::uniform_real_distribution<double>(0.0, cum)(rng_);
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs_[i].first / sum;
    if (r < acc) return probs_[i].second;
  }
  return probs_[keep - 1].second;
}

}  // namespace epserve
