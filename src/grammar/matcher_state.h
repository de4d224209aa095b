// Matcher internals shared by matcher.cc (stacks, stepping) and mask.cc (trie walks, cache).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "grammar/grammar_ir.h"
#include "grammar/matcher.h"
#include "grammar/vocab.h"
#include "grammar/walk_memo.h"

namespace epserve::grammar {

// A parse stack node: the element at `pos` is matched next, then the stack `parent`
// (-1: nothing, the parse is complete). `cost`: fewest bytes from here to a complete parse.
struct StackNode {
  uint32_t pos;
  int32_t parent;
  int64_t cost;
};

// Hash-consed stack nodes: Intern(pos, parent) returns one id per distinct pair.
class StackPool {
 public:
  explicit StackPool(const Grammar* g) : g_(g) { Clear(); }
  int32_t Intern(uint32_t pos, int32_t parent);
  const StackNode& node(int32_t id) const { return nodes_[id]; }
  size_t size() const { return nodes_.size(); }
  void Clear();

 private:
  void Grow();
  const Grammar* g_;
  std::vector<StackNode> nodes_;
  std::vector<int32_t> slots_;  // open addressing (linear probing); -1 = empty
};

// A set of (position, parent) pairs, cleared in O(1) (generation stamps): the pairs one
// step's expansion has met.
class PairSet {
 public:
  PairSet() { Clear(); }
  void Clear();
  // True when `key` was not in the set (it is now).
  bool Insert(uint64_t key);
  size_t size() const { return count_; }

 private:
  void Grow();
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> gens_;
  uint32_t gen_ = 0;
  size_t count_ = 0;
};

// Fails (IsTooComplex) when the grammar's start state expands past kMaxClosure stacks.
Status CheckStartClosure(const Grammar& g);

struct Matcher::State {
  State(const Grammar* g, const TokenVocab* v) : grammar(g), vocab(v), pool(g) {}

  // Expands references from (pos, parent) until every stack's top is a byte set or a token,
  // or the stack is empty; appends the stacks to out (unsorted). Iterative, and each
  // (pos, parent) pair met since BeginStep is expanded once: a fan-out of references to the
  // same rules costs the pairs, not the paths to them. Past kMaxClosure pairs in one step it
  // sets `overflow` and stops.
  void Settle(uint32_t pos, int32_t parent, StackSet* out);
  void BeginStep() { seen.Clear(); }
  // The stacks after `in` matches byte b (sorted, unique).
  void StepByte(const StackSet& in, uint8_t b, StackSet* out);
  // The stacks after `in` matches the special token `id` through Token elements.
  void StepToken(const StackSet& in, int32_t id, StackSet* out);
  int64_t Cost(const StackSet& set) const;
  // The content of `stacks` (positions from top to bottom of each stack, sorted): the mask
  // cache key, equal across matchers for equal states.
  void Key(std::vector<uint32_t>* key) const;
  // Keeps only the nodes the current stacks reach once the pool has grown large.
  void MaybeCompact();

  // The id (in memo) of the set after set_id's set matches byte, or WalkMemo::kDead.
  int32_t Transition(int32_t set_id, uint8_t byte);  // mask.cc
  void ComputeMask(uint64_t* words);                 // mask.cc
  void ComputeClosingMask(uint64_t* words);          // mask.cc

  const Grammar* grammar;
  const TokenVocab* vocab;
  StackPool pool;
  StackSet stacks;
  bool terminated = false;
  bool overflow = false;  // a step's expansion passed kMaxClosure: the state is incomplete
  PairSet seen;
  std::vector<std::pair<uint32_t, int32_t>> work;
  int64_t cache_hits = 0, cache_misses = 0;
  WalkMemo memo;                   // scratch of one trie walk
  std::vector<int32_t> depth_ids;  // per trie depth: the memo id of the set there
  StackSet tmp_a, tmp_b;
};

}  // namespace epserve::grammar
