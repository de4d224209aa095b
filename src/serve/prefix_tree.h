// PrefixTree: the request router's approximate picture of which prompt prefixes each engine
// instance ("group", a DP replica; SGLang's router calls it a tenant) has in its KV cache.
//
// One radix tree over token ids with compressed edges, shared by all groups: each node records,
// for every group that holds it, when that group last used it (a logical clock that ticks once
// per Insert). The tree is approximate: it only knows what the router sent where, not what the
// engines actually kept.
//
// Invariants: a group that holds a node holds all of its ancestors (a held set is a union of
// prefixes); every node but the root is held by at least one group and has a non-empty edge.
// group_tokens(g) is the sum of the edge lengths of the nodes g holds, total_tokens() the sum
// over groups, so num_nodes() <= total_tokens().
//
// Memory is bounded: when an Insert takes total_tokens() above max_tokens, the least recently
// used group-leaf entries (a node g holds none of whose children g holds) are dropped, oldest
// first, until total_tokens() <= 90% of max_tokens. Eviction thus runs in batches, and each
// batch costs O(tree size) amortized over at least max_tokens / 10 newly inserted tokens.
// Nodes no group holds any more are freed, and a node left with one child held by the same
// groups is merged into it.
//
// Thread safety: none; the owner serializes calls (RoutingPolicy holds a mutex).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace epserve::serve {

class PrefixTree {
 public:
  // REQUIRES: num_groups >= 1, max_tokens >= 1.
  PrefixTree(int num_groups, int64_t max_tokens);

  // `group` now holds every prefix of `tokens`: adds what it did not hold, refreshes the last
  // access time of the whole path, then evicts if the tree is over its bound. The path just
  // inserted is the most recent, so it is evicted last (only if it alone exceeds the bound).
  // REQUIRES: 0 <= group < num_groups().
  void Insert(std::span<const int32_t> tokens, int group);

  // For each group, the length of the longest prefix of `tokens` that group holds. Does not
  // touch access times (Insert of the routed prompt does that). O(tokens + path nodes * groups
  // holding them); allocates only the result.
  std::vector<int64_t> MatchLengths(std::span<const int32_t> tokens) const;

  // The group lost its cache (went down, restarted): forgets everything it held.
  void RemoveGroup(int group);

  int num_groups() const { return static_cast<int>(group_tokens_.size()); }
  int64_t max_tokens() const { return max_tokens_; }
  int64_t group_tokens(int group) const { return group_tokens_[group]; }
  int64_t total_tokens() const { return total_tokens_; }
  int64_t num_nodes() const { return num_nodes_; }  // excluding the root

  // CHECKs every invariant above (tests; O(tree size)).
  void CheckInvariants() const;

 private:
  struct Holder {
    int32_t group;
    int64_t last_access;
  };
  struct Node {
    std::vector<int32_t> edge;                          // tokens from the parent to this node
    std::vector<std::pair<int32_t, int32_t>> children;  // (first edge token, node), sorted
    std::vector<Holder> holders;                        // unordered; few per node
    int32_t parent = -1;
    uint32_t generation = 0;  // bumped when the slot is freed: stale eviction entries skip it
    bool alive = false;
  };
  static constexpr int32_t kRoot = 0;

  int32_t NewNode();
  void FreeNode(int32_t n);
  int32_t FindChild(int32_t n, int32_t token) const;
  void SetChild(int32_t n, int32_t token, int32_t child);  // adds or replaces
  void EraseChild(int32_t n, int32_t token);
  const Holder* FindHolder(int32_t n, int group) const;
  bool SameHolders(int32_t a, int32_t b) const;
  bool IsLeafFor(int32_t n, int group) const;
  void Hold(int32_t n, int group, int64_t now);
  // Splits n's edge after `keep` tokens; returns the new upper node that took n's place.
  int32_t Split(int32_t n, int64_t keep);
  // Moves n's edge onto the front of its only child's and frees n.
  void MergeIntoChild(int32_t n);
  // Drops `group` from group-leaf n (freeing or merging nodes); returns n's former parent when
  // it has become a leaf for `group`, else -1.
  int32_t Release(int32_t n, int group);
  // Releases group-leaf entries, oldest first, until total_tokens_ <= target; with only_group
  // >= 0, only that group's entries, until it holds nothing.
  void EvictUntil(int64_t target, int only_group);

  int64_t max_tokens_;
  int64_t clock_ = 0;
  int64_t total_tokens_ = 0;
  int64_t num_nodes_ = 0;
  std::vector<int64_t> group_tokens_;
  std::vector<Node> nodes_;  // nodes_[kRoot] is the root: empty edge, no holders
  std::vector<int32_t> free_;
};

}  // namespace epserve::serve
