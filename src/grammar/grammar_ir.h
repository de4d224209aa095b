// The compiled form of a grammar, as the Matcher runs it (llama.cpp's grammar layout, over
// bytes): rules, each a list of alternatives; an alternative is a run of elements in
// `elements` ended by a kEnd element. An element matches one byte of a 256-bit set, one special
// token, or a whole rule (kRef). Position 0 holds the start: [kRef root, kEnd].
//
// Invariants (checked by GrammarBuilder::Build): no rule is left-recursive, even through rules
// that match the empty string, so expanding references always terminates; every rule can
// complete (min_rest is finite everywhere).
// Thread safety: immutable after Build, apart from the mask caches (own lock).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace epserve::grammar {

class TokenVocab;
class MaskCache;

struct ByteSet {
  uint64_t bits[4] = {0, 0, 0, 0};
  bool Has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void Add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void AddRange(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) Add(static_cast<uint8_t>(b));
  }
  bool operator==(const ByteSet& o) const {
    return bits[0] == o.bits[0] && bits[1] == o.bits[1] && bits[2] == o.bits[2] &&
           bits[3] == o.bits[3];
  }
};

enum class ElementKind : uint8_t { kEnd, kBytes, kToken, kRef };

struct Element {
  ElementKind kind;
  uint32_t arg;  // kBytes: index into byte_sets; kToken: token id; kRef: rule index
};

class Grammar {
 public:
  Grammar();
  ~Grammar();

  std::vector<Element> elements;
  std::vector<ByteSet> byte_sets;
  std::vector<std::vector<uint32_t>> rule_alts;  // per rule: start position of each alternative
  std::vector<std::string> rule_names;
  // Per position: the fewest bytes from that element to its alternative's end (a special
  // token counts as one byte). Per rule: the fewest bytes of any alternative.
  std::vector<int64_t> min_rest;
  std::vector<int64_t> rule_min;

  // The mask cache of this grammar with `vocab` (made on first use; 8 MB, LRU).
  MaskCache& CacheFor(const TokenVocab& vocab) const;
  // The bytes this grammar holds: its tables and its mask caches as they are now.
  size_t MemoryBytes() const;

 private:
  mutable std::mutex mu_;
  mutable std::vector<std::pair<uint64_t, std::unique_ptr<MaskCache>>> caches_;
};

}  // namespace epserve::grammar
