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

void Sampler::Distribution(const float* logits, int vocab, std::vector<float>* p) {
  p->assign(vocab, 0.0f);
  if (greedy()) {
    (*p)[ArgMax(logits, vocab)] = 1.0f;
    return;
  }
  // The same kept set and weights as Sample.
  const float mx = logits[ArgMax(logits, vocab)];
  probs_.resize(vocab);
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) {
    const float e = std::exp((logits[i] - mx) / opt_.temperature);
    probs_[i] = {e, i};
    sum += e;
  }
  std::sort(probs_.begin(), probs_.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  const size_t limit = opt_.top_k > 0 ? std::min<size_t>(opt_.top_k, probs_.size()) : probs_.size();
  if (limit < probs_.size()) {
    sum = 0.0;
    for (size_t i = 0; i < limit; ++i) sum += probs_[i].first;
  }
  double cum = 0.0;
  size_t keep = 0;
  while (keep < limit) {
    cum += probs_[keep++].first / sum;
    if (cum >= opt_.top_p) break;
  }
  for (size_t i = 0; i < keep; ++i)
    (*p)[probs_[i].second] = static_cast<float>(probs_[i].first / sum / cum);
}

int32_t Sampler::SampleFrom(const float* w, int vocab) {
  double total = 0.0;
  for (int i = 0; i < vocab; ++i) total += w[i];
  const double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  double acc = 0.0;
  int32_t last = 0;
  for (int i = 0; i < vocab; ++i) {
    if (w[i] <= 0.0f) continue;
    acc += w[i];
    last = i;
    if (r < acc) return i;
  }
  return last;
}

int32_t Sampler::VerifyDraft(const float* logits, int vocab, int32_t d, const std::vector<float>& q,
                             bool* accepted) {
  if (greedy()) {
    const int32_t best = ArgMax(logits, vocab);
    *accepted = best == d;
    return best;
  }
  std::vector<float>& p = scratch_;
  Distribution(logits, vocab, &p);
  const float qd = static_cast<int>(q.size()) == vocab ? q[d] : 0.0f;
  *accepted = qd > 0 && Uniform() < std::min(1.0, static_cast<double>(p[d]) / qd);
  if (*accepted) return d;
  double mass = 0;
  if (qd > 0)
    for (int v = 0; v < vocab; ++v) {
      p[v] = std::max(0.0f, p[v] - q[v]);
      mass += p[v];
    }
  if (qd > 0 && mass <= 0) Distribution(logits, vocab, &p);  // q covered p: p itself
  return SampleFrom(p.data(), vocab);
}

}  // namespace epserve
