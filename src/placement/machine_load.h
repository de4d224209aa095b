// Where the router sends tokens between machines, predicted on the profile: the placement steps
// that even out load (traffic copies, the rank split, rank rebalancing) need to know how much of
// an expert's load each of its machines serves. Under topology-aware routing a token's experts
// are routed together (router.h): an expert left without a copy on the token's machine goes to
// a machine the token visits anyway, so which copy serves it depends on the token's other
// experts. No per-expert formula captures that; replaying the profile's expert sets through the
// router itself does.
// Value functions; safe to call from any thread.
#pragma once

#include <vector>

#include "placement/placement.h"
#include "placement/router.h"
#include "placement/token_sets.h"

namespace epserve::placement {

// A copy of an expert at machine level: the machine and its routing weight (the sum of its
// copies' weights on that machine).
struct MachineCopy {
  int node = 0;
  double weight = 1.0;
};

// The router between machines: the layer with one rank per machine, rank m holding machine m's
// copies (router.h routes between machines the same whichever rank of a machine holds a copy).
// Layer index 0. REQUIRES: as for PredictRemoteArrivals.
Router MachineRouter(const std::vector<std::vector<MachineCopy>>& copies, int top_k, int num_nodes,
                     RoutingPolicy policy);

// The key of the sample PredictRemoteArrivals and the copy planner route set `s` from machine
// `src` with (a fixed one, so that repeated replays agree).
uint64_t SetRoutingKey(int s, int src);

// remote[e * num_nodes + m]: the profiled load (token-expert pairs) machine m serves for expert e
// from tokens held on other machines, when every set's tokens start evenly on every machine
// (data-parallel attention deals prompts round-robin) and route with `policy`. Tokens of a
// machine with a copy of e keep e there, so machine m serves count(e) / num_nodes of e's load
// from its own tokens whenever it holds e, plus remote[e * num_nodes + m].
// REQUIRES: copies.size() == sets.num_experts(), every expert at least one copy, nodes in range,
// at most one entry per (expert, machine), weights > 0.
std::vector<double> PredictRemoteArrivals(const TokenSets& sets,
                                          const std::vector<std::vector<MachineCopy>>& copies,
                                          int num_nodes, RoutingPolicy policy);

}  // namespace epserve::placement
