#include "serve/prefix_tree.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include "base/check.h"

namespace epserve::serve {
namespace {

size_t CommonPrefix(const std::vector<int32_t>& edge, std::span<const int32_t> tokens) {
  const size_t n = std::min(edge.size(), tokens.size());
  return std::mismatch(edge.begin(), edge.begin() + n, tokens.begin()).first - edge.begin();
}

}  // namespace

PrefixTree::PrefixTree(int num_groups, int64_t max_tokens)
    : max_tokens_(max_tokens), group_tokens_(num_groups, 0) {
  CHECK(num_groups >= 1) << num_groups;
  CHECK(max_tokens >= 1) << max_tokens;
  nodes_.emplace_back();
  nodes_[kRoot].alive = true;
}

int32_t PrefixTree::NewNode() {
  ++num_nodes_;
  if (!free_.empty()) {
    const int32_t n = free_.back();
    free_.pop_back();
    nodes_[n].alive = true;
    return n;
  }
  CHECK(nodes_.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()));
  nodes_.emplace_back();
  nodes_.back().alive = true;
  return static_cast<int32_t>(nodes_.size() - 1);
}

void PrefixTree::FreeNode(int32_t n) {
  const uint32_t generation = nodes_[n].generation + 1;
  nodes_[n] = Node{};  // releases the edge's and children's memory
  nodes_[n].generation = generation;
  free_.push_back(n);
  --num_nodes_;
}

int32_t PrefixTree::FindChild(int32_t n, int32_t token) const {
  const auto& children = nodes_[n].children;
  auto it = std::lower_bound(children.begin(), children.end(), token,
                             [](const auto& child, int32_t t) { return child.first < t; });
  return it != children.end() && it->first == token ? it->second : -1;
}

void PrefixTree::SetChild(int32_t n, int32_t token, int32_t child) {
  auto& children = nodes_[n].children;
  auto it = std::lower_bound(children.begin(), children.end(), token,
                             [](const auto& c, int32_t t) { return c.first < t; });
  if (it != children.end() && it->first == token) {
    it->second = child;
  } else {
    children.insert(it, {token, child});
  }
}

void PrefixTree::EraseChild(int32_t n, int32_t token) {
  auto& children = nodes_[n].children;
  auto it = std::lower_bound(children.begin(), children.end(), token,
                             [](const auto& c, int32_t t) { return c.first < t; });
  DCHECK(it != children.end() && it->first == token);
  children.erase(it);
}

const PrefixTree::Holder* PrefixTree::FindHolder(int32_t n, int group) const {
  for (const Holder& h : nodes_[n].holders) {
    if (h.group == group) return &h;
  }
  return nullptr;
}

bool PrefixTree::SameHolders(int32_t a, int32_t b) const {
  if (nodes_[a].holders.size() != nodes_[b].holders.size()) return false;
  for (const Holder& h : nodes_[a].holders) {
    if (FindHolder(b, h.group) == nullptr) return false;
  }
  return true;
}

bool PrefixTree::IsLeafFor(int32_t n, int group) const {
  for (const auto& [token, child] : nodes_[n].children) {
    if (FindHolder(child, group) != nullptr) return false;
  }
  return true;
}

void PrefixTree::Hold(int32_t n, int group, int64_t now) {
  Node& node = nodes_[n];
  for (Holder& h : node.holders) {
    if (h.group == group) {
      h.last_access = now;
      return;
    }
  }
  node.holders.push_back({group, now});
  const auto len = static_cast<int64_t>(node.edge.size());
  group_tokens_[group] += len;
  total_tokens_ += len;
}

int32_t PrefixTree::Split(int32_t n, int64_t keep) {
  const int32_t u = NewNode();  // before taking references: nodes_ may grow
  Node& lower = nodes_[n];
  Node& upper = nodes_[u];
  upper.edge.assign(lower.edge.begin(), lower.edge.begin() + keep);
  lower.edge.erase(lower.edge.begin(), lower.edge.begin() + keep);
  upper.holders = lower.holders;  // same groups, same times: token counts are unchanged
  upper.parent = lower.parent;
  upper.children = {{lower.edge[0], n}};
  lower.parent = u;
  SetChild(upper.parent, upper.edge[0], u);
  return u;
}

void PrefixTree::MergeIntoChild(int32_t n) {
  const int32_t c = nodes_[n].children[0].second;
  Node& node = nodes_[n];
  Node& child = nodes_[c];
  // Both are held by the same groups, so every group's token count stays. The child keeps its
  // own (older or equal) access times: whether it is a leaf for a group does not change.
  child.edge.insert(child.edge.begin(), node.edge.begin(), node.edge.end());
  child.parent = node.parent;
  SetChild(child.parent, child.edge[0], c);
  FreeNode(n);
}

void PrefixTree::Insert(std::span<const int32_t> tokens, int group) {
  CHECK(group >= 0 && group < num_groups()) << group;
  const int64_t now = ++clock_;
  int32_t cur = kRoot;
  size_t pos = 0;
  while (pos < tokens.size()) {
    int32_t child = FindChild(cur, tokens[pos]);
    if (child < 0) {
      const int32_t leaf = NewNode();
      nodes_[leaf].edge.assign(tokens.begin() + pos, tokens.end());
      nodes_[leaf].parent = cur;
      SetChild(cur, tokens[pos], leaf);
      Hold(leaf, group, now);
      break;
    }
    const size_t k = CommonPrefix(nodes_[child].edge, tokens.subspan(pos));
    if (k < nodes_[child].edge.size()) child = Split(child, static_cast<int64_t>(k));
    Hold(child, group, now);
    pos += k;
    cur = child;
  }
  if (total_tokens_ > max_tokens_) EvictUntil(max_tokens_ - max_tokens_ / 10, -1);
}

std::vector<int64_t> PrefixTree::MatchLengths(std::span<const int32_t> tokens) const {
  std::vector<int64_t> lengths(group_tokens_.size(), 0);
  int32_t cur = kRoot;
  size_t pos = 0;
  while (pos < tokens.size()) {
    const int32_t child = FindChild(cur, tokens[pos]);
    if (child < 0) break;
    const Node& node = nodes_[child];
    const size_t k = CommonPrefix(node.edge, tokens.subspan(pos));
    pos += k;
    // Deeper nodes are held by a subset of the groups holding shallower ones, so the last
    // write for a group is its deepest held node.
    for (const Holder& h : node.holders) lengths[h.group] = static_cast<int64_t>(pos);
    if (k < node.edge.size()) break;
    cur = child;
  }
  return lengths;
}

void PrefixTree::RemoveGroup(int group) {
  CHECK(group >= 0 && group < num_groups()) << group;
  EvictUntil(0, group);
}

int32_t PrefixTree::Release(int32_t n, int group) {
  Node& node = nodes_[n];
  auto it = std::find_if(node.holders.begin(), node.holders.end(),
                         [group](const Holder& h) { return h.group == group; });
  DCHECK(it != node.holders.end());
  *it = node.holders.back();
  node.holders.pop_back();
  const auto len = static_cast<int64_t>(node.edge.size());
  group_tokens_[group] -= len;
  total_tokens_ -= len;
  const int32_t parent = node.parent;
  if (node.holders.empty()) {
    DCHECK(node.children.empty());  // children are held by a subset of n's holders
    EraseChild(parent, node.edge[0]);
    FreeNode(n);
  } else if (node.children.size() == 1 && SameHolders(n, node.children[0].second)) {
    MergeIntoChild(n);
  }
  if (parent == kRoot) return -1;
  if (IsLeafFor(parent, group)) return parent;
  const auto& siblings = nodes_[parent].children;
  if (siblings.size() == 1 && SameHolders(parent, siblings[0].second)) MergeIntoChild(parent);
  return -1;
}

void PrefixTree::EvictUntil(int64_t target, int only_group) {
  struct Entry {
    int64_t last_access;
    int32_t group, node;
    uint32_t generation;
  };
  // Oldest first; ties by group, then node, so eviction is deterministic.
  auto later = [](const Entry& a, const Entry& b) {
    return std::tie(a.last_access, a.group, a.node) > std::tie(b.last_access, b.group, b.node);
  };
  std::vector<Entry> heap;
  for (int32_t n = 1; n < static_cast<int32_t>(nodes_.size()); ++n) {
    if (!nodes_[n].alive) continue;
    for (const Holder& h : nodes_[n].holders) {
      if (only_group >= 0 && h.group != only_group) continue;
      if (IsLeafFor(n, h.group)) heap.push_back({h.last_access, h.group, n, nodes_[n].generation});
    }
  }
  std::make_heap(heap.begin(), heap.end(), later);
  auto done = [&] {
    return only_group >= 0 ? group_tokens_[only_group] == 0 : total_tokens_ <= target;
  };
  while (!done() && !heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Entry e = heap.back();
    heap.pop_back();
    const Node& node = nodes_[e.node];
    if (!node.alive || node.generation != e.generation || !FindHolder(e.node, e.group)) continue;
    const int32_t parent = Release(e.node, e.group);
    if (parent < 0) continue;
    heap.push_back(
        {FindHolder(parent, e.group)->last_access, e.group, parent, nodes_[parent].generation});
    std::push_heap(heap.begin(), heap.end(), later);
  }
}

void PrefixTree::CheckInvariants() const {
  std::vector<int64_t> sums(group_tokens_.size(), 0);
  int64_t count = 0;
  std::vector<int32_t> stack = {kRoot};
  while (!stack.empty()) {
    const int32_t n = stack.back();
    stack.pop_back();
    const Node& node = nodes_[n];
    CHECK(node.alive) << n;
    CHECK(std::is_sorted(node.children.begin(), node.children.end()));
    for (const auto& [token, c] : node.children) {
      CHECK(nodes_[c].parent == n && !nodes_[c].edge.empty() && nodes_[c].edge[0] == token);
      stack.push_back(c);
    }
    if (n == kRoot) {
      CHECK(node.edge.empty() && node.holders.empty());
      continue;
    }
    ++count;
    CHECK(!node.holders.empty()) << "node " << n << " held by no group";
    for (const Holder& h : node.holders) {
      CHECK(node.parent == kRoot || FindHolder(node.parent, h.group)) << "not prefix-closed";
      CHECK(FindHolder(n, h.group) == &h) << "group " << h.group << " twice on node " << n;
      sums[h.group] += static_cast<int64_t>(node.edge.size());
    }
  }
  CHECK(count == num_nodes_) << count << " != " << num_nodes_;
  int64_t total = 0;
  for (size_t g = 0; g < sums.size(); ++g) {
    CHECK(sums[g] == group_tokens_[g]) << "group " << g << ": " << sums[g];
    total += sums[g];
  }
  CHECK(total == total_tokens_) << total << " != " << total_tokens_;
}

}  // namespace epserve::serve
