#include "placement/machine_load.h"

#include <algorithm>
#include <cstdint>

#include "base/check.h"
#include "placement/router.h"

namespace epserve::placement {

Router MachineRouter(const std::vector<std::vector<MachineCopy>>& copies, int top_k, int num_nodes,
                     RoutingPolicy policy) {
  const int n = static_cast<int>(copies.size());
  Placement p;
  p.routing = policy;
  p.topology = Topology{.num_nodes = num_nodes, .ranks_per_node = 1};
  p.model.num_experts = n;
  p.model.top_k = top_k;
  LayerPlacement& layer = p.layers.emplace_back();
  layer.slots.assign(num_nodes, {});
  layer.copies.assign(n, {});
  for (int e = 0; e < n; ++e) {
    for (const MachineCopy& c : copies[e]) {
      layer.slots[c.node].push_back(e);
      layer.copies[e].push_back(ExpertCopy{.rank = c.node, .weight = c.weight});
    }
  }
  StatusOr<Router> router = Router::Create(p, policy);
  CHECK(router.ok());
  return *std::move(router);
}

uint64_t SetRoutingKey(int s, int src) {
  return MixHash((static_cast<uint64_t>(s) << 16) | static_cast<uint64_t>(src));
}

std::vector<double> PredictRemoteArrivals(const TokenSets& sets,
                                          const std::vector<std::vector<MachineCopy>>& copies,
                                          int num_nodes, RoutingPolicy policy) {
  const int n = sets.num_experts();
  const int k = sets.k();
  CHECK(static_cast<int>(copies.size()) == n);
  std::vector<double> remote(static_cast<size_t>(n) * num_nodes, 0.0);
  if (num_nodes < 2) return remote;
  const Router router = MachineRouter(copies, k, num_nodes, policy);
  std::vector<int32_t> experts(k);
  std::vector<int> nodes(k);
  for (int s = 0; s < sets.num_sets(); ++s) {
    const uint16_t* set = sets.Set(s);
    std::copy(set, set + k, experts.begin());
    const double share = sets.count(s) / num_nodes;
    for (int src = 0; src < num_nodes; ++src) {
      // One routing per (set, source machine); the key makes the weighted choices a fixed sample.
      router.PickRanks(0, experts, src, SetRoutingKey(s, src), nodes);
      for (int i = 0; i < k; ++i) {
        if (nodes[i] != src)
          remote[static_cast<size_t>(experts[i]) * num_nodes + nodes[i]] += share;
      }
    }
  }
  return remote;
}

}  // namespace epserve::placement
