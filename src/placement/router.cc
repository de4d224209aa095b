#include "placement/router.h"

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "base/check.h"

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

const Router::Copy* Router::begin(int layer_idx, int expert) const {
  return copies_.data() + offset_[static_cast<size_t>(layer_idx) * num_experts_ + expert];
}

const Router::Copy* Router::end(int layer_idx, int expert) const {
  return copies_.data() + offset_[static_cast<size_t>(layer_idx) * num_experts_ + expert + 1];
}

int Router::PickRank(int layer_idx, int expert, int src_rank, uint64_t token_key) const {
  const int32_t e = expert;
  int rank = -1;
  PickRanks(layer_idx, std::span<const int32_t>(&e, 1), src_rank, token_key,
            std::span<int>(&rank, 1));
  return rank;
}

void Router::PickRanks(int layer_idx, std::span<const int32_t> experts, int src_rank,
                       uint64_t token_key, std::span<int> ranks) const {
  DCHECK(layer_idx >= 0 && layer_idx < num_layers_);
  DCHECK(src_rank >= 0 && src_rank < topology_.num_ranks());
  DCHECK(ranks.size() == experts.size());
  auto hash_of = [&](int expert) {
    return MixHash(token_key ^ MixHash((static_cast<uint64_t>(layer_idx) << 32) |
                                       static_cast<uint32_t>(expert)));
  };
  auto all = [](const Copy&) { return true; };
  const int node = topology_.NodeOf(src_rank);
  // Experts not served on the token's machine, and the other machines it already visits.
  thread_local std::vector<int> pending, visited;
  pending.clear();
  visited.clear();
  auto visit = [&](int n) {
    if (std::find(visited.begin(), visited.end(), n) == visited.end()) visited.push_back(n);
  };
  for (size_t i = 0; i < experts.size(); ++i) {
    const int e = experts[i];
    DCHECK(e >= 0 && e < num_experts_);
    const Copy* b = begin(layer_idx, e);
    const Copy* en = end(layer_idx, e);
    ranks[i] = -1;
    if (en - b == 1) {
      ranks[i] = b->rank;
      if (b->node != node) visit(b->node);
      continue;
    }
    const uint64_t hash = hash_of(e);
    if (policy_ == RoutingPolicy::kWeighted) {
      ranks[i] = Choose(b, en, hash, all);
      continue;
    }
    for (const Copy* c = b; c != en; ++c) {
      if (c->rank == src_rank) ranks[i] = src_rank;
    }
    if (ranks[i] < 0)
      ranks[i] = Choose(b, en, hash, [node](const Copy& c) { return c.node == node; });
    if (ranks[i] >= 0) continue;
    // Copies on one other machine only: the token visits it whatever the others do.
    bool one_machine = true;
    for (const Copy* c = b; c != en; ++c) one_machine &= c->node == b->node;
    if (one_machine) {
      ranks[i] = Choose(b, en, hash, all);
      visit(b->node);
    } else {
      pending.push_back(static_cast<int>(i));
    }
  }
  auto on_visited = [&](const Copy& c) {
    return std::find(visited.begin(), visited.end(), c.node) != visited.end();
  };
  thread_local std::vector<std::pair<int, int>> count;  // (machine, pending experts it holds)
  while (!pending.empty()) {
    // Each pending expert with a copy on a machine the token visits goes there.
    size_t kept = 0;
    for (int i : pending) {
      const int e = experts[i];
      ranks[i] = Choose(begin(layer_idx, e), end(layer_idx, e), hash_of(e), on_visited);
      if (ranks[i] < 0) pending[kept++] = i;
    }
    pending.resize(kept);
    if (pending.empty()) break;
    // Visit the machine that holds copies of the most pending experts; among tied machines, the
    // first pending expert with a copy on one of them picks by its weights.
    count.clear();
    for (int i : pending) {
      const int e = experts[i];
      const Copy* b = begin(layer_idx, e);
      const Copy* en = end(layer_idx, e);
      for (const Copy* c = b; c != en; ++c) {
        bool seen = false;  // count an expert once per machine
        for (const Copy* d = b; d != c; ++d) seen |= d->node == c->node;
        if (seen) continue;
        auto it = std::find_if(count.begin(), count.end(),
                               [&](const auto& nc) { return nc.first == c->node; });
        if (it == count.end()) {
          count.emplace_back(c->node, 1);
        } else {
          ++it->second;
        }
      }
    }
    int most = 0;
    for (const auto& nc : count) most = std::max(most, nc.second);
    auto tied = [&](const Copy& c) {
      for (const auto& nc : count) {
        if (nc.first == c.node) return nc.second == most;
      }
      return false;
    };
    for (size_t j = 0; j < pending.size(); ++j) {
      const int i = pending[j];
      const int e = experts[i];
      ranks[i] = Choose(begin(layer_idx, e), end(layer_idx, e), hash_of(e), tied);
      if (ranks[i] >= 0) {
        visit(topology_.NodeOf(ranks[i]));
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(j));
        break;
      }
    }
  }
}

}  // namespace epserve::placement
