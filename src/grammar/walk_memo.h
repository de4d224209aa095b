// WalkMemo: the stack sets one trie walk meets, interned to ids, with their byte transitions
// memoized (a lazily built DFA over this walk's states). Inside a JSON string almost every
// byte leads back to the same set, so a walk costs about one table lookup per trie node
// instead of one expansion of every stack. Cleared at the start of each walk, so node ids of a
// compacted pool are never mixed in.
#pragma once

#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace epserve::grammar {

// A set of parse stacks (grammar/matcher_state.h): sorted, unique stack node ids; -1 stands for
// the empty (complete) stack.
using StackSet = std::vector<int32_t>;

class WalkMemo {
 public:
  static constexpr int32_t kUnknown = -2;
  static constexpr int32_t kDead = -1;

  void Reset() {
    sets_.clear();
    costs_.clear();
    index_.clear();
    rows_.clear();
  }

  // The id of `set` (interned; `cost` is remembered for new sets).
  int32_t Intern(const StackSet& set, int64_t cost) {
    auto [it, inserted] = index_.try_emplace(set, static_cast<int32_t>(sets_.size()));
    if (inserted) {
      sets_.push_back(set);
      costs_.push_back(cost);
      if (rows_.size() < kMaxRows) {
        rows_.emplace_back();
        rows_.back().fill(kUnknown);
      }
    }
    return it->second;
  }

  const StackSet& set(int32_t id) const { return sets_[id]; }
  int64_t cost(int32_t id) const { return costs_[id]; }

  int32_t Next(int32_t id, uint8_t byte) const {
    return static_cast<size_t>(id) < rows_.size() ? rows_[id][byte] : kUnknown;
  }
  void SetNext(int32_t id, uint8_t byte, int32_t next) {
    if (static_cast<size_t>(id) < rows_.size()) rows_[id][byte] = next;
  }

 private:
  // Dense transition rows for the first sets only (1 KB each): the hot ones come first.
  static constexpr size_t kMaxRows = 1024;

  struct SetHash {
    size_t operator()(const StackSet& s) const {
      uint64_t h = 0x9E3779B97F4A7C15ULL;
      for (int32_t x : s) h = (h ^ static_cast<uint32_t>(x)) * 0x100000001b3ULL;
      return static_cast<size_t>(h ^ (h >> 29));
    }
  };

  std::vector<StackSet> sets_;
  std::vector<int64_t> costs_;
  std::unordered_map<StackSet, int32_t, SetHash> index_;
  std::vector<std::array<int32_t, 256>> rows_;
};

}  // namespace epserve::grammar
