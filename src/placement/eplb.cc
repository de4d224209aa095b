#include "placement/eplb.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace epserve::placement {

Packing BalancedPacking(const std::vector<double>& weights, const std::vector<int>& capacity) {
  const int num_items = static_cast<int>(weights.size());
  const int num_packs = static_cast<int>(capacity.size());
  CHECK(std::accumulate(capacity.begin(), capacity.end(), 0) == num_items);
  std::vector<int> order(num_items);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return weights[a] > weights[b]; });
  Packing packing{std::vector<int>(num_items, -1), std::vector<int>(num_items, -1)};
  std::vector<double> pack_weight(num_packs, 0.0);
  std::vector<int> pack_items(num_packs, 0);
  for (int item : order) {
    int best = -1;
    for (int p = 0; p < num_packs; ++p) {
      if (pack_items[p] >= capacity[p]) continue;
      if (best < 0 || pack_weight[p] < pack_weight[best]) best = p;
    }
    CHECK(best >= 0);
    packing.pack[item] = best;
    packing.slot[item] = pack_items[best]++;
    pack_weight[best] += weights[item];
  }
  return packing;
}

std::vector<int> ReplicateExperts(const std::vector<double>& weights, int num_physical) {
  const int num_logical = static_cast<int>(weights.size());
  CHECK(num_physical >= num_logical);
  std::vector<int> phy_to_log(num_logical);
  std::iota(phy_to_log.begin(), phy_to_log.end(), 0);
  std::vector<int> count(num_logical, 1);
  for (int p = num_logical; p < num_physical; ++p) {
    int best = 0;
    for (int e = 1; e < num_logical; ++e) {
      if (weights[e] / count[e] > weights[best] / count[best]) best = e;
    }
    phy_to_log.push_back(best);
    ++count[best];
  }
  return phy_to_log;
}

std::vector<int> EvenSplit(int total, int parts) {
  std::vector<int> split(parts, total / parts);
  for (int i = 0; i < total % parts; ++i) ++split[i];
  return split;
}

StatusOr<EplbResolved> ResolveEplb(const Topology& topology, const ModelShape& model,
                                   const EplbOptions& options) {
  const int n = model.num_experts;
  const int nodes = topology.num_nodes;
  int groups = options.num_groups > 0 ? options.num_groups : model.num_expert_groups;
  if (options.num_groups > 0 && n % options.num_groups != 0) {
    return Status::InvalidArgument("EPLB: " + std::to_string(options.num_groups) +
                                   " expert groups do not divide " + std::to_string(n) +
                                   " experts");
  }
  switch (options.mode) {
    case EplbMode::kAuto:
      if (groups % nodes == 0) return EplbResolved{EplbMode::kHierarchical, groups};
      return EplbResolved{EplbMode::kGlobal, 1};
    case EplbMode::kGlobal:
      return EplbResolved{EplbMode::kGlobal, 1};
    case EplbMode::kHierarchical:
      if ((groups % nodes != 0 || n % groups != 0) && options.num_groups == 0) {
        // The model's groups do not fit: the finest contiguous grouping that does, at most one
        // group per rank (one per rank for 64 experts; 6 groups of 10 for 60 on 2 x 4).
        for (groups = topology.num_ranks(); groups > 0; --groups) {
          if (groups % nodes == 0 && n % groups == 0) break;
        }
      }
      if (groups <= 0) {
        return Status::InvalidArgument("EPLB hierarchical: " + std::to_string(n) +
                                       " experts cannot be split into equal groups spread evenly "
                                       "over " +
                                       std::to_string(nodes) + " machines");
      }
      if (groups % nodes != 0 || n % groups != 0) {
        return Status::InvalidArgument("EPLB hierarchical: " + std::to_string(groups) +
                                       " expert groups of " + std::to_string(n) +
                                       " experts cannot be spread evenly over " +
                                       std::to_string(nodes) + " machines");
      }
      return EplbResolved{EplbMode::kHierarchical, groups};
  }
  return Status::Internal("EPLB: unknown mode");
}

StatusOr<LayerPlacement> PlaceEplbLayer(const LayerProfile& profile, const Topology& topology,
                                        const ModelShape& model, const EplbOptions& options) {
  const int n = model.num_experts;
  const std::vector<double>& load = profile.load;
  const int num_redundant = options.num_redundant;
  if (static_cast<int>(load.size()) != n) {
    return Status::InvalidArgument("EPLB: load has " + std::to_string(load.size()) +
                                   " experts, model has " + std::to_string(n));
  }
  if (num_redundant < 0) return Status::InvalidArgument("EPLB: negative redundant copies");
  ASSIGN_OR_RETURN(EplbResolved resolved, ResolveEplb(topology, model, options));
  // Global mode is the hierarchical algorithm on one machine holding one group.
  const int nodes = resolved.mode == EplbMode::kGlobal ? 1 : topology.num_nodes;
  const int ranks_per_node =
      resolved.mode == EplbMode::kGlobal ? topology.num_ranks() : topology.ranks_per_node;
  const int groups = resolved.num_groups;
  const int group_size = n / groups;
  if (n + num_redundant < topology.num_ranks()) {
    return Status::InvalidArgument("EPLB: " + std::to_string(n + num_redundant) +
                                   " expert copies cannot fill " +
                                   std::to_string(topology.num_ranks()) + " ranks");
  }

  // Step 1: pack expert groups onto machines by group load.
  std::vector<double> group_load(groups, 0.0);
  for (int e = 0; e < n; ++e) group_load[e / group_size] += load[e];
  const Packing group_packing =
      BalancedPacking(group_load, std::vector<int>(nodes, groups / nodes));
  std::vector<std::vector<int>> node_experts(nodes);
  std::vector<double> node_load(nodes, 0.0);
  for (int g = 0; g < groups; ++g) {
    for (int e = g * group_size; e < (g + 1) * group_size; ++e) {
      node_experts[group_packing.pack[g]].push_back(e);
      node_load[group_packing.pack[g]] += load[e];
    }
  }
  // Extra copies go to the heaviest machines first when they do not divide evenly.
  std::vector<int> node_order(nodes);
  std::iota(node_order.begin(), node_order.end(), 0);
  std::stable_sort(node_order.begin(), node_order.end(),
                   [&](int a, int b) { return node_load[a] > node_load[b]; });
  const std::vector<int> redundant_split = EvenSplit(num_redundant, nodes);

  std::vector<std::vector<int>> slots(topology.num_ranks());
  for (int i = 0; i < nodes; ++i) {
    const int node = node_order[i];
    const std::vector<int>& experts = node_experts[node];
    std::vector<double> weights(experts.size());
    for (size_t j = 0; j < experts.size(); ++j) weights[j] = load[experts[j]];
    // Step 2: replicate the heaviest experts within the machine.
    const int num_physical = static_cast<int>(experts.size()) + redundant_split[i];
    const std::vector<int> phy_to_log = ReplicateExperts(weights, num_physical);
    std::vector<int> count(experts.size(), 0);
    for (int l : phy_to_log) ++count[l];
    // Step 3: pack physical experts, each carrying an equal share, onto the machine's ranks.
    std::vector<double> phy_weight(num_physical);
    for (int p = 0; p < num_physical; ++p)
      phy_weight[p] = weights[phy_to_log[p]] / count[phy_to_log[p]];
    const Packing rank_packing =
        BalancedPacking(phy_weight, EvenSplit(num_physical, ranks_per_node));
    // Rank slots in packing order.
    std::vector<std::vector<int>> node_slots(ranks_per_node);
    for (int local = 0; local < ranks_per_node; ++local) {
      node_slots[local].resize(
          std::count(rank_packing.pack.begin(), rank_packing.pack.end(), local));
    }
    for (int p = 0; p < num_physical; ++p) {
      node_slots[rank_packing.pack[p]][rank_packing.slot[p]] = experts[phy_to_log[p]];
    }
    for (int local = 0; local < ranks_per_node; ++local) {
      slots[node * ranks_per_node + local] = std::move(node_slots[local]);
    }
  }
  return LayerFromSlots(profile.layer_id, n, std::move(slots));
}

}  // namespace epserve::placement
