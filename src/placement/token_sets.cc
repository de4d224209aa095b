#include "placement/token_sets.h"

#include <algorithm>
#include <numeric>

#include "base/check.h"

namespace epserve::placement {

TokenSets TokenSets::FromTrace(const Trace& trace, int layer_idx) {
  CHECK(layer_idx >= 0 && layer_idx < trace.num_layers());
  const int k = trace.top_k();
  const int64_t num_tokens = trace.num_tokens();
  // Sort the tokens' sorted sets, then merge equal neighbours.
  std::vector<uint16_t> sorted(static_cast<size_t>(num_tokens) * k);
  for (int64_t t = 0; t < num_tokens; ++t) {
    uint16_t* out = sorted.data() + t * k;
    std::copy(trace.Experts(layer_idx, t), trace.Experts(layer_idx, t) + k, out);
    std::sort(out, out + k);
  }
  std::vector<int64_t> order(num_tokens);
  std::iota(order.begin(), order.end(), 0);
  auto set = [&](int64_t t) { return sorted.data() + t * k; };
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return std::lexicographical_compare(set(a), set(a) + k, set(b), set(b) + k);
  });
  TokenSets sets;
  sets.num_experts_ = trace.shape().num_experts;
  sets.k_ = k;
  for (size_t i = 0; i < order.size(); ++i) {
    const uint16_t* s = set(order[i]);
    if (i > 0 && std::equal(s, s + k, set(order[i - 1]))) {
      sets.count_.back() += 1;
      continue;
    }
    sets.experts_.insert(sets.experts_.end(), s, s + k);
    sets.count_.push_back(1);
  }
  sets.Index();
  return sets;
}

TokenSets TokenSets::FromSets(int num_experts, int k, const std::vector<uint16_t>& experts,
                              const std::vector<double>& count) {
  CHECK(k > 0 && experts.size() == count.size() * k);
  TokenSets sets;
  sets.num_experts_ = num_experts;
  sets.k_ = k;
  sets.experts_ = experts;
  sets.count_ = count;
  for (size_t s = 0; s < count.size(); ++s) {
    std::sort(sets.experts_.begin() + s * k, sets.experts_.begin() + (s + 1) * k);
  }
  sets.Index();
  return sets;
}

void TokenSets::Index() {
  sets_of_.assign(num_experts_, {});
  total_ = 0;
  for (int s = 0; s < num_sets(); ++s) {
    for (int i = 0; i < k_; ++i) {
      CHECK(Set(s)[i] < num_experts_);
      sets_of_[Set(s)[i]].push_back(s);
    }
    total_ += count_[s];
  }
}

}  // namespace epserve::placement
