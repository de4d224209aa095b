// Routing among an expert's copies (SPEC §8 step 6), the piece the runtime calls per token:
// given the token's expert and the rank holding the token, pick the rank that serves it.
//   kWeighted: a weighted choice over all copies (weights from the placement file);
//   kTopology: a copy on the token's own rank if any, else one on its machine; the experts left
//              go to as few other machines as the copies allow: first to machines the token
//              must visit anyway (an expert with copies on one machine only), then, greedily,
//              to the machine holding copies of the most of those still left (a set cover);
//              weighted choices inside each tier and among tied machines.
// The weighted choice is a hash of (token_key, layer, expert), not a random draw: the same key
// always goes to the same rank, every rank of a run agrees, and replays are reproducible. Over
// many tokens each copy gets its weight's share.
// Thread safety: immutable after Create; PickRank may be called from any number of threads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "placement/placement.h"

namespace epserve::placement {

class Router {
 public:
  // Validates the placement (ValidatePlacement) and copies what routing needs.
  static StatusOr<Router> Create(const Placement& placement, RoutingPolicy policy);

  // The ranks that serve one token's experts in layer `layer_idx` (an index into
  // placement.layers): ranks[i] serves experts[i] for a token held by `src_rank`. Under kTopology
  // the choice for one expert depends on the token's others (they share machines), so a token's
  // experts are routed together, in the given (gate) order. REQUIRES: indices in range,
  // ranks.size() == experts.size() (DCHECKed).
  void PickRanks(int layer_idx, std::span<const int32_t> experts, int src_rank, uint64_t token_key,
                 std::span<int> ranks) const;
  // One expert on its own: PickRanks of a one-expert token.
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
  const Copy* begin(int layer_idx, int expert) const;
  const Copy* end(int layer_idx, int expert) const;

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
