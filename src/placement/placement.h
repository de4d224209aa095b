// Where every expert of every MoE layer lives, and how tokens choose among its copies. The file
// form is described in docs/placement-format.md (placement_io.h reads and writes it); the
// runtime loads it with LoadPlacement and routes with placement::Router (router.h).
// Value types; thread safety as for any value.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "placement/trace.h"

namespace epserve::placement {

// Machines x ranks. Rank r lives on machine r / ranks_per_node.
struct Topology {
  int num_nodes = 1;
  int ranks_per_node = 1;

  int num_ranks() const { return num_nodes * ranks_per_node; }
  int NodeOf(int rank) const { return rank / ranks_per_node; }
  int LocalIndex(int rank) const { return rank % ranks_per_node; }
  Status Validate() const;
};

// How a token picks among the copies of an expert (SPEC §8 step 6).
enum class RoutingPolicy {
  kWeighted,  // "wrr": weighted choice over all copies
  kTopology,  // "topo": own rank, else own machine, else anywhere; weighted within a tier
};
std::string_view RoutingPolicyName(RoutingPolicy policy);
StatusOr<RoutingPolicy> ParseRoutingPolicy(std::string_view name);

struct ExpertCopy {
  int rank = 0;
  double weight = 1.0;  // routing weight, relative to the expert's other copies; > 0
};

struct LayerPlacement {
  int layer_id = 0;
  // slots[r]: the experts rank r holds, in slot order (its weights load in this order).
  std::vector<std::vector<int>> slots;
  // copies[e]: the distinct ranks holding expert e with their routing weights; copies[e][0] is
  // the primary copy, the rest are replicas that share its load.
  std::vector<std::vector<ExpertCopy>> copies;

  // Slots beyond one per expert.
  int NumExtraCopies() const;
};

struct Placement {
  std::string strategy;  // "contiguous", "eplb" or "grace"; informative
  RoutingPolicy routing = RoutingPolicy::kTopology;
  Topology topology;
  ModelShape model;
  std::vector<LayerPlacement> layers;  // ascending layer_id

  // Index into layers of model layer `layer_id`, or -1.
  int LayerIndex(int layer_id) const;
  int NumExtraCopies() const;
};

// Checks every invariant stated above: ranks in range, every expert held somewhere, slots and
// copies agreeing, positive finite weights, increasing layer ids.
Status ValidatePlacement(const Placement& placement);

// Builds a layer from slots alone; each distinct rank holding e becomes a copy whose weight is
// the number of slots it holds e in (an equal share per slot). The primary copy is the lowest
// rank.
LayerPlacement LayerFromSlots(int layer_id, int num_experts, std::vector<std::vector<int>> slots);

// Per-rank load when every expert's load is split over its copies in proportion to the weights.
std::vector<double> RankLoads(const LayerPlacement& layer, const std::vector<double>& expert_load,
                              int num_ranks);

}  // namespace epserve::placement
