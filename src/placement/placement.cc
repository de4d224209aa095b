#include "placement/placement.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace epserve::placement {

Status Topology::Validate() const {
  if (num_nodes < 1 || ranks_per_node < 1) {
    return Status::InvalidArgument("topology needs at least 1 node and 1 rank per node, got " +
                                   std::to_string(num_nodes) + " x " +
                                   std::to_string(ranks_per_node));
  }
  if (num_nodes > 4096 || ranks_per_node > 4096) {
    return Status::InvalidArgument("topology is implausibly large");
  }
  return Status::Ok();
}

std::string_view RoutingPolicyName(RoutingPolicy policy) {
  return policy == RoutingPolicy::kWeighted ? "wrr" : "topo";
}

StatusOr<RoutingPolicy> ParseRoutingPolicy(std::string_view name) {
  if (name == "wrr") return RoutingPolicy::kWeighted;
  if (name == "topo") return RoutingPolicy::kTopology;
  return Status::InvalidArgument("unknown routing policy \"" + std::string(name) +
                                 "\" (expected wrr or topo)");
}

int LayerPlacement::NumExtraCopies() const {
  int slots_total = 0;
  for (const auto& s : slots) slots_total += static_cast<int>(s.size());
  return slots_total - static_cast<int>(copies.size());
}

int Placement::LayerIndex(int layer_id) const {
  for (int i = 0; i < static_cast<int>(layers.size()); ++i) {
    if (layers[i].layer_id == layer_id) return i;
  }
  return -1;
}

int Placement::NumExtraCopies() const {
  int total = 0;
  for (const auto& l : layers) total += l.NumExtraCopies();
  return total;
}

Status ValidatePlacement(const Placement& placement) {
  RETURN_IF_ERROR(placement.topology.Validate());
  RETURN_IF_ERROR(placement.model.Validate());
  const int num_ranks = placement.topology.num_ranks();
  const int n = placement.model.num_experts;
  if (placement.layers.empty()) return Status::InvalidArgument("placement has no layers");
  for (size_t li = 0; li < placement.layers.size(); ++li) {
    const LayerPlacement& layer = placement.layers[li];
    const std::string where = "layer " + std::to_string(layer.layer_id);
    if (layer.layer_id < 0 || layer.layer_id > 1000000) {
      return Status::InvalidArgument(where + ": layer id out of range");
    }
    if (li > 0 && layer.layer_id <= placement.layers[li - 1].layer_id) {
      return Status::InvalidArgument(where + ": layer ids must increase");
    }
    if (static_cast<int>(layer.slots.size()) != num_ranks) {
      return Status::InvalidArgument(where + ": " + std::to_string(layer.slots.size()) +
                                     " ranks listed, topology has " + std::to_string(num_ranks));
    }
    if (static_cast<int>(layer.copies.size()) != n) {
      return Status::InvalidArgument(where + ": copies listed for " +
                                     std::to_string(layer.copies.size()) + " experts, model has " +
                                     std::to_string(n));
    }
    // held[e * num_ranks + r]: slots of e on rank r.
    std::vector<int> held(static_cast<size_t>(n) * num_ranks, 0);
    for (int r = 0; r < num_ranks; ++r) {
      for (int e : layer.slots[r]) {
        if (e < 0 || e >= n) {
          return Status::InvalidArgument(where + ": rank " + std::to_string(r) + " holds expert " +
                                         std::to_string(e) + ", out of range");
        }
        ++held[static_cast<size_t>(e) * num_ranks + r];
      }
    }
    for (int e = 0; e < n; ++e) {
      const auto& copies = layer.copies[e];
      if (copies.empty()) {
        return Status::InvalidArgument(where + ": expert " + std::to_string(e) + " has no copy");
      }
      int listed = 0;
      for (size_t c = 0; c < copies.size(); ++c) {
        const ExpertCopy& copy = copies[c];
        if (copy.rank < 0 || copy.rank >= num_ranks) {
          return Status::InvalidArgument(where + ": expert " + std::to_string(e) +
                                         " has a copy on rank " + std::to_string(copy.rank) +
                                         ", out of range");
        }
        if (!(copy.weight > 0) || !std::isfinite(copy.weight)) {
          return Status::InvalidArgument(where + ": expert " + std::to_string(e) +
                                         " has a copy with weight that is not positive");
        }
        for (size_t d = 0; d < c; ++d) {
          if (copies[d].rank == copy.rank) {
            return Status::InvalidArgument(where + ": expert " + std::to_string(e) +
                                           " lists rank " + std::to_string(copy.rank) + " twice");
          }
        }
        if (held[static_cast<size_t>(e) * num_ranks + copy.rank] == 0) {
          return Status::InvalidArgument(where + ": expert " + std::to_string(e) +
                                         " has a copy on rank " + std::to_string(copy.rank) +
                                         " which does not hold it");
        }
        ++listed;
      }
      int holders = 0;
      for (int r = 0; r < num_ranks; ++r)
        holders += held[static_cast<size_t>(e) * num_ranks + r] > 0;
      if (holders != listed) {
        return Status::InvalidArgument(where + ": expert " + std::to_string(e) + " is held by " +
                                       std::to_string(holders) + " ranks but has " +
                                       std::to_string(listed) + " copies");
      }
    }
  }
  return Status::Ok();
}

LayerPlacement LayerFromSlots(int layer_id, int num_experts, std::vector<std::vector<int>> slots) {
  LayerPlacement layer;
  layer.layer_id = layer_id;
  layer.copies.resize(num_experts);
  for (int r = 0; r < static_cast<int>(slots.size()); ++r) {
    for (int e : slots[r]) {
      CHECK(e >= 0 && e < num_experts);
      auto& copies = layer.copies[e];
      auto it = std::find_if(copies.begin(), copies.end(),
                             [r](const ExpertCopy& c) { return c.rank == r; });
      if (it == copies.end()) {
        copies.push_back(ExpertCopy{.rank = r, .weight = 1.0});
      } else {
        it->weight += 1.0;
      }
    }
  }
  layer.slots = std::move(slots);
  return layer;
}

std::vector<double> RankLoads(const LayerPlacement& layer, const std::vector<double>& expert_load,
                              int num_ranks) {
  std::vector<double> loads(num_ranks, 0.0);
  for (size_t e = 0; e < layer.copies.size(); ++e) {
    double total = 0;
    for (const ExpertCopy& c : layer.copies[e]) total += c.weight;
    for (const ExpertCopy& c : layer.copies[e]) loads[c.rank] += expert_load[e] * c.weight / total;
  }
  return loads;
}

}  // namespace epserve::placement
