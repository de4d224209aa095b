// Mask computation: a depth-first walk of the vocabulary's byte trie carrying the stack set,
// pruning a subtree as soon as its prefix leaves no stack alive; and the mask cache.
#include <algorithm>
#include <cstring>
#include <vector>

#include "grammar/grammar_ir.h"
#include "grammar/mask_cache.h"
#include "grammar/matcher_state.h"

namespace epserve::grammar {

namespace {

// Per (grammar, vocabulary): at most this many bytes of cached masks (about 500 bitmaps of
// DeepSeek-V3's vocabulary; sparse masks take far less).
constexpr size_t kCacheBytes = size_t{8} << 20;

void SetBit(uint64_t* words, int32_t id) { words[id >> 6] |= uint64_t{1} << (id & 63); }

}  // namespace

Grammar::Grammar() = default;
Grammar::~Grammar() = default;

MaskCache& Grammar::CacheFor(const TokenVocab& vocab) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [uid, cache] : caches_) {
    if (uid == vocab.uid()) return *cache;
  }
  // Caches of vocabularies that are gone stay until the grammar goes; a process has one or two.
  caches_.emplace_back(vocab.uid(), std::make_unique<MaskCache>(vocab.size(), kCacheBytes));
  return *caches_.back().second;
}

int32_t Matcher::State::Transition(int32_t set_id, uint8_t byte) {
  int32_t next = memo.Next(set_id, byte);
  if (next != WalkMemo::kUnknown) return next;
  StepByte(memo.set(set_id), byte, &tmp_a);
  next = tmp_a.empty() ? WalkMemo::kDead : memo.Intern(tmp_a, Cost(tmp_a));
  memo.SetNext(set_id, byte, next);
  return next;
}

void Matcher::State::ComputeMask(uint64_t* words) {
  std::memset(words, 0, (static_cast<size_t>(vocab->size()) + 63) / 64 * sizeof(uint64_t));
  const auto& trie = vocab->trie();
  const auto& ids = vocab->trie_ids();
  memo.Reset();
  depth_ids.resize(static_cast<size_t>(vocab->max_token_bytes()) + 1);
  depth_ids[0] = memo.Intern(stacks, 0);
  for (size_t i = 0; i < trie.size();) {
    const TokenVocab::TrieNode& node = trie[i];
    const int32_t next = Transition(depth_ids[node.depth - 1], node.byte);
    if (next < 0) {
      i = node.end;
      continue;
    }
    depth_ids[node.depth] = next;
    for (uint32_t k = 0; k < node.num_ids; ++k) SetBit(words, ids[node.first_id + k]);
    ++i;
  }
  bool complete = false;
  for (int32_t id : stacks) {
    if (id < 0) {
      complete = true;
      continue;
    }
    const Element& e = grammar->elements[pool.node(id).pos];
    if (e.kind == ElementKind::kToken && static_cast<int32_t>(e.arg) < vocab->size()) {
      SetBit(words, static_cast<int32_t>(e.arg));
    }
  }
  if (complete) {
    for (int32_t id : vocab->stop_ids()) SetBit(words, id);
  }
}

void Matcher::State::ComputeClosingMask(uint64_t* words) {
  std::memset(words, 0, (static_cast<size_t>(vocab->size()) + 63) / 64 * sizeof(uint64_t));
  if (terminated) return;
  const int64_t dist = Cost(stacks);
  if (dist == 0) {
    for (int32_t id : vocab->stop_ids()) SetBit(words, id);
    return;
  }
  // Cost drops by at most one per byte, so a prefix whose cost is above dist - depth can
  // not lie on a shortest path, nor can anything below it in the trie.
  const auto& trie = vocab->trie();
  const auto& ids = vocab->trie_ids();
  memo.Reset();
  depth_ids.resize(static_cast<size_t>(vocab->max_token_bytes()) + 1);
  depth_ids[0] = memo.Intern(stacks, dist);
  for (size_t i = 0; i < trie.size();) {
    const TokenVocab::TrieNode& node = trie[i];
    const int32_t next = Transition(depth_ids[node.depth - 1], node.byte);
    if (next < 0 || memo.cost(next) != dist - node.depth) {
      i = node.end;
      continue;
    }
    depth_ids[node.depth] = next;
    for (uint32_t k = 0; k < node.num_ids; ++k) SetBit(words, ids[node.first_id + k]);
    ++i;
  }
  // Each special token the stacks may take once (10,000 tool alternatives all wait for the
  // same separator token: stepping the whole set per stack was quadratic).
  std::vector<int32_t> tokens;
  for (int32_t id : stacks) {
    if (id < 0) continue;
    const Element& e = grammar->elements[pool.node(id).pos];
    if (e.kind == ElementKind::kToken && static_cast<int32_t>(e.arg) < vocab->size())
      tokens.push_back(static_cast<int32_t>(e.arg));
  }
  std::sort(tokens.begin(), tokens.end());
  tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
  StackSet after;
  for (int32_t token : tokens) {
    StepToken(stacks, token, &after);
    if (Cost(after) == dist - 1) SetBit(words, token);
  }
}

}  // namespace epserve::grammar
