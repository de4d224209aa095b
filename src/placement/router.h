// Routing among an expert's copies (SPEC §8 step 6), the piece the runtime calls per token:
// given the token's expert and the rank holding the token, pick the rank that serves it.
//   kWeighted: a weighted choice over all copies (weights from the placement file);
//   kTopology: a copy on the token's own rank if any, else one on its machine, else any copy,
//              with the weighted choice inside the tier.
// The weighted choice is a hash of (token_key, layer, expert), not a random draw: the same key
// always goes to the same rank, every rank of a run agrees, and replays are reproducible. Over
// many tokens each copy gets its weight's share.
// Thread safety: immutable after Create; PickRank may be called from any number of threads.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "placement/placement.h"

namespace epserve::placement {

class Router {
 public:
  // Validates the placement (ValidatePlacement) and copies what routing needs.
  static StatusOr<Router> Create(const Placement& placement, RoutingPolicy policy);

  // The rank that serves `expert` in layer `layer_idx` (an index into placement.layers) for a
  // token held by `src_rank`. REQUIRES: indices in range (DCHECKed).
  int PickRank(int layer_idx, int expert, int src_rank, uint64_t token_key) const;

  RoutingPolicy policy() const { return policy_; }
  const Topology& topology() const { return topology_; }
  int num_layers() const { return num_layers_; }

 private:
  struct Copy {
    int rank;
    int node;
    double weight;  // normalized over the expert's copies
  };
  Router() = default;
  // Weighted choice among copies [begin, end) that pass `keep`.
  template <typename Keep>
  int Choose(const Copy* begin, const Copy* end, uint64_t hash, Keep keep) const;

  RoutingPolicy policy_ = RoutingPolicy::kTopology;
  Topology topology_;
  int num_layers_ = 0;
  int num_experts_ = 0;
  // Copies of (layer, expert) are copies_[offset_[i]..offset_[i+1]) with
  // i = layer * num_experts + expert.
  std::vector<Copy> copies_;
  std::vector<uint32_t> offset_;
};

// splitmix64 finalizer; exposed for tests.
uint64_t MixHash(uint64_t x);

}  // namespace epserve::placement
