#include "placement/traffic_copies.h"

#include <algorithm>

#include "base/check.h"

namespace epserve::placement {

TrafficCopiesResult PlanTrafficCopies(const TokenSets& sets, const TrafficCopiesOptions& options) {
  const int m_count = options.num_nodes;
  const int n = sets.num_experts();
  CHECK(static_cast<int>(options.home.size()) == n && static_cast<int>(options.load.size()) == n);
  TrafficCopiesResult result;
  result.node_load.assign(m_count, 0.0);
  if (m_count < 2) return result;
  // need[(s * M + src) * M + p]: experts of set s that a token held on machine src must fetch
  // from machine p (p != src).
  const size_t mm = static_cast<size_t>(m_count) * m_count;
  std::vector<int> need(static_cast<size_t>(sets.num_sets()) * mm, 0);
  for (int s = 0; s < sets.num_sets(); ++s) {
    for (int i = 0; i < sets.k(); ++i) {
      const int p = options.home[sets.Set(s)[i]];
      for (int src = 0; src < m_count; ++src) {
        if (src != p) ++need[s * mm + src * m_count + p];
      }
    }
  }
  auto cross = [&]() {
    double total = 0;
    for (int s = 0; s < sets.num_sets(); ++s) {
      int distinct = 0;
      for (size_t i = 0; i < mm; ++i) distinct += need[s * mm + i] > 0;
      total += sets.count(s) * distinct;
    }
    return total / m_count;
  };
  result.cross_before = cross();
  // has[e * M + m]: e has a copy on m.
  std::vector<char> has(static_cast<size_t>(n) * m_count, 0);
  for (int e = 0; e < n; ++e) {
    has[e * m_count + options.home[e]] = 1;
    result.node_load[options.home[e]] += options.load[e];
  }
  for (int c = 0; c < options.max_copies; ++c) {
    double best = 1e-9;
    int best_e = -1, best_m = -1;
    for (int e = 0; e < n; ++e) {
      const int h = options.home[e];
      const double moved = options.load[e] / m_count;
      for (int m = 0; m < m_count; ++m) {
        if (has[e * m_count + m]) continue;
        if (result.node_load[m] + moved > options.max_node_load &&
            result.node_load[m] + moved >= result.node_load[h]) {
          continue;  // over the bound, unless it evens the two machines out
        }
        double saved = 0;
        for (int s : sets.SetsOf(e)) {
          if (need[s * mm + m * m_count + h] == 1) saved += sets.count(s);
        }
        saved /= m_count;
        if (saved > best) {
          best = saved;
          best_e = e;
          best_m = m;
        }
      }
    }
    if (best_e < 0) break;
    const int h = options.home[best_e];
    for (int s : sets.SetsOf(best_e)) --need[s * mm + best_m * m_count + h];
    has[best_e * m_count + best_m] = 1;
    const double moved = options.load[best_e] / m_count;
    result.node_load[h] -= moved;
    result.node_load[best_m] += moved;
    result.copies.push_back(TrafficCopy{.expert = best_e, .node = best_m, .saved = best});
  }
  result.cross_after = cross();
  return result;
}

}  // namespace epserve::placement
