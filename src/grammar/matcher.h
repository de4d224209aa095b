// Matcher: the matching state of one request against a Grammar, over a TokenVocab.
//
// The state is a set of parse stacks (llama.cpp's grammar sampler, over bytes): each stack is
// the element to match next plus the continuations below it, so ambiguous grammars (anyOf)
// are followed along every reading at once. Stacks are hash-consed nodes (element position,
// parent node) in a pool of this matcher, so equal stacks are equal ids and the set
// deduplicates by sorting ids. FillMask walks the vocabulary's byte trie carrying the stack
// set and pruning dead subtrees; its result is cached in the Grammar per vocabulary, keyed by
// the stack set's content, so states that repeat (inside strings, between items) cost a copy.
//
// Thread safety: not thread-safe; one per request. Keeps the Grammar and TokenVocab alive.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace epserve::grammar {

class Grammar;
class TokenVocab;

class Matcher {
 public:
  Matcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocab> v);
  ~Matcher();
  Matcher(const Matcher&);
  Matcher& operator=(const Matcher&);

  // Advances by one token; false (state unchanged) if the grammar does not allow it. A stop
  // id is accepted iff IsComplete() (unless the grammar itself matches it as a Token element),
  // and then the matcher is terminated.
  bool AcceptToken(int32_t id);
  // Bitmask over the vocabulary (bit i of words[i / 64]): the tokens AcceptToken accepts now.
  // REQUIRES: words has (vocab size + 63) / 64 entries.
  void FillMask(uint64_t* words);
  // Like FillMask, but only tokens every byte of which lies on a shortest path to a complete
  // parse (MinBytesToComplete drops by the token's length; a special token counts as one
  // byte), plus the stop ids when complete. For the end of a max_tokens budget. Not cached.
  void FillClosingMask(uint64_t* words);
  // Fewest bytes still needed for a complete parse (0 when complete).
  int64_t MinBytesToComplete() const;
  // The bytes so far form a complete match (a stop id may come).
  bool IsComplete() const;
  // A stop id was accepted, or nothing but a stop id can follow.
  bool IsTerminated() const;

  // A step's parse state passed kMaxClosure stacks (grammar/builder.h): the state and its
  // masks are incomplete from then on, AcceptToken refuses every token, and the caller must end
  // the request (an error naming the grammar as too complex).
  bool Overflowed() const;

  // FillMask calls answered from the grammar's mask cache, and those computed, by this matcher.
  struct CacheStats {
    int64_t hits = 0;
    int64_t misses = 0;
  };
  CacheStats cache_stats() const;

  struct State;  // grammar/matcher_state.h

 private:
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::unique_ptr<State> state_;
};

}  // namespace epserve::grammar
