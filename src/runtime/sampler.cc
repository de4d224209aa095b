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
  double total = 0.0;
  for (int i = 0; i < vocab; ++i) {
    const float p = std::exp((logits[i] - mx) / opt_.temperature);  // the likeliest: 1
    probs_[i] = {p, i};
    total += p;
  }
  const size_t n = probs_.size();
  const bool top_k = opt_.top_k > 0 && static_cast<size_t>(opt_.top_k) < n;
  if (!top_k && opt_.min_p <= 0.0f && opt_.top_p >= 1.0f) {
    // Nothing is cut: every token keeps its weight, in id order. No sort: at DeepSeek's
    // 129,280 ids a full sort cost ~20 ms per token.
    k.count = n;
    k.sum = total;
    k.mass = 1.0;
    return k;
  }
  auto more_likely = [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  // The kept set is a prefix of the tokens sorted by likelihood: the top k, those at least
  // min_p times the likeliest (weight 1), never a masked (-inf, weight 0) one.
  size_t range = n;  // the kept tokens are among probs_[0, range)
  if (opt_.min_p > 0.0f)
    range = std::partition(probs_.begin(), probs_.end(),
                           [&](const auto& x) { return x.first >= opt_.min_p; }) -
            probs_.begin();
  else
    range = std::partition(probs_.begin(), probs_.end(),
                           [](const auto& x) { return x.first > 0.0f; }) -
            probs_.begin();
  range = std::max<size_t>(range, 1);
  size_t limit = top_k ? std::min<size_t>(opt_.top_k, range) : range;
  // Sort as much of the prefix as the nucleus needs (the first `sorted` are in order): all
  // of it with top-k (its renormalizer is the top k's weight), else a growing prefix until its
  // mass reaches top_p.
  size_t sorted = top_k || opt_.top_p >= 1.0f ? limit : std::min<size_t>(limit, 64);
  double range_sum = 0.0;
  for (size_t i = 0; i < range; ++i) range_sum += probs_[i].first;
  for (;;) {
    std::partial_sort(probs_.begin(), probs_.begin() + sorted, probs_.begin() + range,
                      more_likely);
    if (sorted == limit) break;
    double mass = 0.0;
    for (size_t i = 0; i < sorted; ++i) mass += probs_[i].first;
    if (mass / range_sum >= opt_.top_p) break;  // the nucleus ends inside the sorted prefix
    sorted = std::min(limit, sorted * 8);
  }
  k.sum = 0.0;
  for (size_t i = 0; i < limit; ++i) k.sum += probs_[i].first;
  while (k.count < sorted) {
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
  int32_t last = probs_[0].second;
  for (size_t i = 0; i < k.count; ++i) {
    if (probs_[i].first <= 0.0f) continue;
    acc += probs_[i].first / k.sum;
    last = probs_[i].second;
    if (r < acc) return last;
  }
  return last;
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
