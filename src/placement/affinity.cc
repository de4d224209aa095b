#include "placement/affinity.h"

namespace epserve::placement {

LayerProfile ProfileLayer(const Trace& trace, int layer_idx) {
  CHECK(layer_idx >= 0 && layer_idx < trace.num_layers());
  const int n = trace.shape().num_experts;
  const int k = trace.top_k();
  LayerProfile profile;
  profile.layer_id = trace.layer_ids()[layer_idx];
  profile.num_experts = n;
  profile.load.assign(n, 0.0);
  // Integer counts first: exact and faster than accumulating doubles.
  std::vector<int64_t> pairs(static_cast<size_t>(n) * n, 0);
  std::vector<int64_t> load(n, 0);
  for (int64_t t = 0; t < trace.num_tokens(); ++t) {
    const uint16_t* e = trace.Experts(layer_idx, t);
    for (int a = 0; a < k; ++a) {
      ++load[e[a]];
      int64_t* row = pairs.data() + static_cast<size_t>(e[a]) * n;
      for (int b = 0; b < k; ++b) row[e[b]] += (a != b);
    }
  }
  profile.affinity.assign(pairs.begin(), pairs.end());
  profile.load.assign(load.begin(), load.end());
  return profile;
}

std::vector<double> SubAffinity(const std::vector<double>& affinity, int n,
                                const std::vector<int>& members) {
  const size_t m = members.size();
  std::vector<double> sub(m * m);
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < m; ++j) {
      sub[i * m + j] = affinity[static_cast<size_t>(members[i]) * n + members[j]];
    }
  }
  return sub;
}

}  // namespace epserve::placement
