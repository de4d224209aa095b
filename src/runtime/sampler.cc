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

Sampler::Kept Sampler::KeepNucleus(const float* logits, int vocab) {
  const float mx = logits[ArgMax(logits, vocab)];
  probs_.resize(vocab);
  Kept k;
  for (int i = 0; i < vocab; ++i) {
    const float p = std::exp((logits[i] - mx) / opt_.temperature);
    probs_[i] = {p, i};
    k.sum += p;
  }
  std::sort(probs_.begin(), probs_.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  // Nucleus: the shortest prefix whose mass reaches top_p.
  size_t limit = opt_.top_k > 0 ? std::min<size_t>(opt_.top_k, probs_.size()) : probs_.size();
  while (limit > 1 && probs_[limit - 1].first <= 0.0f) --limit;  // masked (-inf) tokens
  if (opt_.min_p > 0.0f) {  // min-p: relative to the likeliest token (probs_[0])
    const float floor = opt_.min_p * probs_[0].first;
    size_t keep = 1;
    while (keep < limit && probs_[keep].first >= floor) ++keep;
    limit = keep;
  }
  if (limit < probs_.size()) {  // renormalise over the tokens kept
    k.sum = 0.0;
    for (size_t i = 0; i < limit; ++i) k.sum += probs_[i].first;
  }
  while (k.count < limit) {
    k.mass += probs_[k.count++].first / k.sum;
    if (k.mass >= opt_.top_p) break;
  }
  return k;
}

int32_t Sampler::Sample(const float* logits, int vocab) {
  if (greedy()) return ArgMax(logits, vocab);
  const Kept k = KeepNucleus(logits, vocab);
  double r = std::uniform_real_distribution<double>(0.0, k.mass)(rng_);
  double acc = 0.0;
  for (size_t i = 0; i < k.count; ++i) {
    acc += probs_[i].first / k.sum;
    if (r < acc) return probs_[i].second;
  }
  return probs_[k.count - 1].second;
}

void Sampler::Distribution(const float* logits, int vocab, std::vector<float>* p) {
  p->assign(vocab, 0.0f);
  if (greedy()) {
    (*p)[ArgMax(logits, vocab)] = 1.0f;
    return;
  }
  const Kept k = KeepNucleus(logits, vocab);
  for (size_t i = 0; i < k.count; ++i)
    (*p)[probs_[i].second] = static_cast<float>(probs_[i].first / k.sum / k.mass);
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
  if (qd > 0) {  // the residual max(0, p - q); p itself where q covered all of p
    double mass = 0;
    for (int v = 0; v < vocab; ++v) {
      p[v] = std::max(0.0f, p[v] - q[v]);
      mass += p[v];
    }
    if (mass <= 0) Distribution(logits, vocab, &p);
  }
  return SampleFrom(p.data(), vocab);
}

}  // namespace epserve
