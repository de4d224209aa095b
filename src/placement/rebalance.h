// Routing-aware load prediction and the rank-level rebalancing step of GRACE.
//
// PredictRankLoads says where the router (router.h) will send each expert's tokens, assuming
// every rank is the source of an equal share of every expert's load (data-parallel attention
// deals prompts round-robin, and which prompts land where is not known when placing). Under
// topology-aware routing a copy on the token's own rank takes all of that rank's share, copies
// on the token's machine split the share of the machine's other ranks by weight, and only
// machines with no copy send their share to the weighted choice among all copies; under the
// weighted policy every copy takes its weight's share of everything.
//
// RebalanceRanks moves and swaps expert copies BETWEEN RANKS OF ONE MACHINE so that the
// predicted slowest rank of that machine gets lighter. Which machines hold which experts does
// not change, so the cross-machine traffic of a hierarchical all-to-all is not touched; only the
// expert work per rank (and the NVLink pattern inside the machine) is. Value functions; no
// state, safe to call from any thread on distinct arguments.
#pragma once

#include <vector>

#include "placement/placement.h"

namespace epserve::placement {

// Predicted token-expert pairs per rank for `layer` when expert e receives `expert_load[e]`
// pairs, spread evenly over the source ranks, and routing follows `policy`. `remote`, when
// given, is PredictRemoteArrivals (machine_load.h) for the layer's machines: under topology-aware
// routing the load a machine receives from the others then comes from replaying the profile
// through the router instead of the per-expert estimate above (which assumes a token without a
// copy on its machine takes the weighted choice among all copies, whatever its other experts).
// REQUIRES: every expert has at least one copy, weights > 0, ranks within `topology`.
std::vector<double> PredictRankLoads(const LayerPlacement& layer,
                                     const std::vector<double>& expert_load,
                                     const Topology& topology, RoutingPolicy policy,
                                     const std::vector<double>* remote = nullptr);

struct RebalanceReport {
  int moves = 0;  // copies moved to another rank of their machine
  int swaps = 0;  // pairs of copies exchanged between two ranks of one machine
  // Predicted max / mean rank load (PredictRankLoads) before and after.
  double max_over_mean_before = 0;
  double max_over_mean_after = 0;
};

// Greedy descent, machine by machine: take the machine's predicted heaviest rank and apply the
// single move (one of its copies to another rank of the machine) or swap (one of its copies for
// one of another rank's) that lowers the machine's predicted maximum the most (ties: the lower
// sum of squared rank loads, which also spreads the rest); stop when nothing lowers it. A rank
// never holds two copies of one expert, and moves keep every rank's slot count within the
// smallest and largest slot count the machine had before (the controlled sizes of the
// grouping: memory per rank does not grow). Routing weights stay attached to their copies.
// Deterministic.
// `remote` as for PredictRankLoads; moves between the ranks of one machine do not change it.
RebalanceReport RebalanceRanks(LayerPlacement* layer, const std::vector<double>& expert_load,
                               const Topology& topology, RoutingPolicy policy,
                               const std::vector<double>* remote = nullptr);

}  // namespace epserve::placement
