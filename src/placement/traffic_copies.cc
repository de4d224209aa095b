#include "placement/traffic_copies.h"

#include <algorithm>
#include <cstdint>

#include "base/check.h"
#include "placement/machine_load.h"

namespace epserve::placement {

TrafficCopiesResult PlanTrafficCopies(const TokenSets& sets, const TrafficCopiesOptions& options) {
  const int m_count = options.num_nodes;
  const int n = sets.num_experts();
  const int k = sets.k();
  CHECK(static_cast<int>(options.home.size()) == n && static_cast<int>(options.load.size()) == n);
  TrafficCopiesResult result;
  result.node_load.assign(m_count, 0.0);
  if (m_count < 2) return result;
  std::vector<std::vector<MachineCopy>> copies(n);
  std::vector<char> has(static_cast<size_t>(n) * m_count, 0);  // has[e * M + m]
  for (int e = 0; e < n; ++e) {
    copies[e].push_back(MachineCopy{.node = options.home[e]});
    has[static_cast<size_t>(e) * m_count + options.home[e]] = 1;
  }
  // route[(s * M + src) * k + i]: the machine serving expert Set(s)[i] for s's tokens on src.
  std::vector<int> route(static_cast<size_t>(sets.num_sets()) * m_count * k);
  // value[e * M + q]: (token, machine) copies a copy of e on q would save (see the header).
  std::vector<double> value(static_cast<size_t>(n) * m_count, 0.0);
  double cross = 0;
  std::vector<int32_t> experts(k);
  std::vector<int> visited, old_route(k);
  auto route_of = [&](int s, int src) {
    return route.data() + (static_cast<size_t>(s) * m_count + src) * k;
  };
  // Adds `sign` times what (s, src), routed as `r`, contributes to the traffic, the machine
  // loads and the values.
  auto account = [&](int s, int src, const int* r, double sign) {
    const double share = sign * sets.count(s) / m_count;
    visited.clear();
    for (int i = 0; i < k; ++i) {
      result.node_load[r[i]] += share;
      if (r[i] != src && std::find(visited.begin(), visited.end(), r[i]) == visited.end()) {
        visited.push_back(r[i]);
      }
    }
    cross += share * static_cast<double>(visited.size());
    for (int i = 0; i < k; ++i) {
      const int h = r[i];
      if (h == src || std::count(r, r + k, h) != 1) continue;
      double* v = value.data() + static_cast<size_t>(sets.Set(s)[i]) * m_count;
      v[src] += share;
      for (int q : visited) {
        if (q != h) v[q] += share;
      }
    }
  };
  auto reroute = [&](const Router& router, int s, int src) {
    const uint16_t* set = sets.Set(s);
    std::copy(set, set + k, experts.begin());
    router.PickRanks(0, experts, src, SetRoutingKey(s, src),
                     std::span<int>(route_of(s, src), static_cast<size_t>(k)));
  };
  {
    const Router router = MachineRouter(copies, k, m_count, RoutingPolicy::kTopology);
    for (int s = 0; s < sets.num_sets(); ++s) {
      for (int src = 0; src < m_count; ++src) {
        reroute(router, s, src);
        account(s, src, route_of(s, src), 1.0);
      }
    }
  }
  result.cross_before = cross;
  for (int c = 0; c < options.max_copies; ++c) {
    double best = 1e-9;
    int best_e = -1, best_m = -1;
    for (int e = 0; e < n; ++e) {
      const int h = options.home[e];
      const double moved = options.load[e] / m_count;  // at least its own tokens
      for (int m = 0; m < m_count; ++m) {
        const size_t i = static_cast<size_t>(e) * m_count + m;
        if (has[i]) continue;
        if (result.node_load[m] + moved > options.max_node_load &&
            result.node_load[m] + moved >= result.node_load[h]) {
          continue;  // over the bound, unless it evens the two machines out
        }
        if (value[i] > best) {
          best = value[i];
          best_e = e;
          best_m = m;
        }
      }
    }
    if (best_e < 0) break;
    has[static_cast<size_t>(best_e) * m_count + best_m] = 1;
    copies[best_e].push_back(MachineCopy{.node = best_m, .weight = options.replica_weight});
    const Router router = MachineRouter(copies, k, m_count, RoutingPolicy::kTopology);
    for (int s : sets.SetsOf(best_e)) {
      for (int src = 0; src < m_count; ++src) {
        // Most of these sets' routes do not change (the copy is on neither their machine nor
        // one they visit): only a changed route is accounted again.
        const int* r = route_of(s, src);
        std::copy(r, r + k, old_route.begin());
        reroute(router, s, src);
        if (std::equal(r, r + k, old_route.begin())) continue;
        account(s, src, old_route.data(), -1.0);
        account(s, src, r, 1.0);
      }
    }
    result.copies.push_back(TrafficCopy{.expert = best_e, .node = best_m, .saved = best});
  }
  result.cross_after = cross;
  return result;
}

}  // namespace epserve::placement
