#include "placement/router.h"

namespace epserve::placement {

uint64_t MixHash(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

StatusOr<Router> Router::Create(const Placement& placement, RoutingPolicy policy) {
  RETURN_IF_ERROR(ValidatePlacement(placement));
  Router router;
  router.policy_ = policy;
  router.topology_ = placement.topology;
  router.num_layers_ = static_cast<int>(placement.layers.size());
  router.num_experts_ = placement.model.num_experts;
  router.offset_.push_back(0);
  for (const LayerPlacement& layer : placement.layers) {
    for (const auto& copies : layer.copies) {
      double total = 0;
      for (const ExpertCopy& c : copies) total += c.weight;
      for (const ExpertCopy& c : copies) {
        router.copies_.push_back(Copy{c.rank, placement.topology.NodeOf(c.rank), c.weight / total});
      }
      router.offset_.push_back(static_cast<uint32_t>(router.copies_.size()));
    }
  }
  return router;
}

template <typename Keep>
int Router::Choose(const Copy* begin, const Copy* end, uint64_t hash, Keep keep) const {
  double total = 0;
  int last = -1;
  for (const Copy* c = begin; c != end; ++c) {
    if (keep(*c)) {
      total += c->weight;
      last = c->rank;
    }
  }
  if (last < 0) return -1;
  // 53 random bits in [0, 1), scaled to the tier's total weight.
  double u = static_cast<double>(hash >> 11) * 0x1.0p-53 * total;
  for (const Copy* c = begin; c != end; ++c) {
    if (!keep(*c)) continue;
    u -= c->weight;
    if (u < 0) return c->rank;
  }
  return last;  // rounding left u at or just above 0
}

int Router::PickRank(int layer_idx, int expert, int src_rank, uint64_t token_key) const {
  DCHECK(layer_idx >= 0 && layer_idx < num_layers_);
  DCHECK(expert >= 0 && expert < num_experts_);
  DCHECK(src_rank >= 0 && src_rank < topology_.num_ranks());
  const size_t i = static_cast<size_t>(layer_idx) * num_experts_ + expert;
  const Copy* begin = copies_.data() + offset_[i];
  const Copy* end = copies_.data() + offset_[i + 1];
  if (end - begin == 1) return begin->rank;
  const uint64_t hash =
      MixHash(token_key ^ MixHash((static_cast<uint64_t>(layer_idx) << 32) | expert));
  auto all = [](const Copy&) { return true; };
  if (policy_ == RoutingPolicy::kWeighted) return Choose(begin, end, hash, all);
  for (const Copy* c = begin; c != end; ++c) {
    if (c->rank == src_rank) return src_rank;
  }
  const int node = topology_.NodeOf(src_rank);
  const int same_node = Choose(begin, end, hash, [node](const Copy& c) { return c.node == node; });
  if (same_node >= 0) return same_node;
  return Choose(begin, end, hash, all);
}

}  // namespace epserve::placement
