#include "planner/placement_layout.h"

#include <algorithm>

#include "placement/placement_io.h"
#include "placement/rebalance.h"

namespace epserve::planner {

ExpertPlacement PlacementToLayout(const placement::Placement& p, const std::string& source) {
  ExpertPlacement out;
  out.source = source;
  out.num_ranks = p.topology.num_ranks();
  out.ranks_per_machine = p.topology.ranks_per_node;
  out.num_experts = p.model.num_experts;
  for (const placement::LayerPlacement& layer : p.layers) {
    ExpertLayout layout;
    layout.layer_id = layer.layer_id;
    layout.ranks.resize(out.num_ranks);
    // Share of each (rank, expert) pair, one expert at a time.
    std::vector<std::vector<double>> share(out.num_experts);
    for (int e = 0; e < out.num_experts; ++e) {
      placement::LayerPlacement one;
      one.layer_id = layer.layer_id;
      one.copies = {layer.copies[e]};
      share[e] = placement::PredictRankLoads(one, {1.0}, p.topology, p.routing);
    }
    for (int r = 0; r < out.num_ranks; ++r) {
      const std::vector<int>& slots = layer.slots[r];
      for (int e : slots) {
        const double copies_here = static_cast<double>(std::count(slots.begin(), slots.end(), e));
        layout.ranks[r].push_back({.expert = e, .share = share[e][r] / copies_here});
      }
    }
    out.layers.push_back(std::move(layout));
  }
  return out;
}

StatusOr<ExpertPlacement> LoadPlacementLayout(const std::string& path) {
  ASSIGN_OR_RETURN(placement::Placement p, placement::LoadPlacement(path));
  return PlacementToLayout(p, path);
}

}  // namespace epserve::planner
