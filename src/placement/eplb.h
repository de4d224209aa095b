// DeepSeek's expert-parallel load balancer (EPLB), written from its published description:
//   hierarchical mode: pack the gate's expert groups onto machines so machine loads balance,
//   replicate the heaviest experts within each machine, then pack the physical experts
//   (replicas sharing their expert's load equally) onto the machine's ranks;
//   global mode: replicate over all experts and pack onto all ranks (machines ignored).
// It balances load and ignores co-activation. Unlike the original, the number of extra copies
// need not be a multiple of the number of ranks: ranks then differ by at most one slot.
#pragma once

#include <vector>

#include "base/status.h"
#include "placement/affinity.h"
#include "placement/placement.h"

namespace epserve::placement {

enum class EplbMode { kAuto, kHierarchical, kGlobal };

struct EplbOptions {
  // kAuto: hierarchical when the expert groups divide evenly over machines, else global.
  EplbMode mode = EplbMode::kAuto;
  // Expert groups for the hierarchical mode (contiguous id ranges); 0 = the model's groups, or,
  // when those do not divide evenly over the machines and hierarchical is forced, the most groups
  // (at most one per rank) that divide both the experts and evenly over the machines.
  int num_groups = 0;
  // Extra copies for the layer (physical slots beyond one per expert).
  int num_redundant = 0;
};

// Result of balanced packing: items[i] goes to pack[i] at position slot[i] within it.
struct Packing {
  std::vector<int> pack;
  std::vector<int> slot;
};

// Packs weighted items into bins of the given capacities (sum = number of items): heaviest
// item first, each into the lightest bin that still has room (ties: lowest bin).
Packing BalancedPacking(const std::vector<double>& weights, const std::vector<int>& capacity);

// Adds `num_physical - weights.size()` replicas one at a time, each to the expert with the
// highest load per copy (ties: lowest id). Returns physical -> logical; the first
// weights.size() entries are the identity.
std::vector<int> ReplicateExperts(const std::vector<double>& weights, int num_physical);

// `total` split into `parts` near-equal integers, larger ones first.
std::vector<int> EvenSplit(int total, int parts);

// Places one layer from its profiled expert loads (profile.load; the affinity is not used).
// Returns InvalidArgument when the options do not fit the model and topology.
StatusOr<LayerPlacement> PlaceEplbLayer(const LayerProfile& profile, const Topology& topology,
                                        const ModelShape& model, const EplbOptions& options);

// The mode and group count kAuto / num_groups = 0 resolve to.
struct EplbResolved {
  EplbMode mode = EplbMode::kGlobal;
  int num_groups = 1;
};
StatusOr<EplbResolved> ResolveEplb(const Topology& topology, const ModelShape& model,
                                   const EplbOptions& options);

}  // namespace epserve::placement
