// TokenVocab: the vocabulary as a grammar sees it. Each token id's raw bytes (byte-level BPE
// decoded), which ids are special (matched only by Token elements of a grammar, never by byte
// text), the stop ids (allowed exactly when the grammar is complete), and a byte trie of the
// non-special tokens that mask computation walks.
// Thread safety: immutable after Create; share one per tokenizer across threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace epserve::text {
class Tokenizer;
}

namespace epserve::grammar {

class TokenVocab {
 public:
  // One trie node in depth-first preorder: the node's byte, its depth (1 = first byte), the
  // index just past its subtree, and the ids whose bytes end here (trie_ids()[first_id ..)).
  struct TrieNode {
    uint32_t end;
    uint32_t first_id;
    uint32_t num_ids;
    uint16_t depth;
    uint8_t byte;
  };

  // REQUIRES: special.size() == token_bytes.size(); stop ids in range (CHECKed).
  // Non-special tokens with no bytes are never allowed.
  static std::shared_ptr<const TokenVocab> Create(std::vector<std::string> token_bytes,
                                                  std::vector<bool> special,
                                                  std::vector<int32_t> stop_ids);
  // Bytes of each id via Tokenizer::DecodeBytes({id}); special = Tokenizer::IsSpecial or an
  // added token (or an id the tokenizer does not define). `model_vocab_size` (when larger than
  // the tokenizer's, e.g. DeepSeek-V3's 129280 logits over 128815 tokenizer ids) pads the
  // vocabulary with ids that are never allowed, so masks cover every logit. Fails for a stop
  // id out of range.
  static StatusOr<std::shared_ptr<const TokenVocab>> FromTokenizer(const text::Tokenizer& tok,
                                                                   std::vector<int32_t> stop_ids,
                                                                   int32_t model_vocab_size = 0);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  bool is_special(int32_t id) const { return special_[id] != 0; }
  bool is_stop(int32_t id) const { return stop_[id] != 0; }
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  const std::vector<TrieNode>& trie() const { return trie_; }
  const std::vector<int32_t>& trie_ids() const { return trie_ids_; }
  int max_token_bytes() const { return max_token_bytes_; }
  // Distinct for every TokenVocab made in this process (keys the per-vocabulary mask caches).
  uint64_t uid() const { return uid_; }

 private:
  TokenVocab() = default;
  void BuildTrie();

  std::vector<std::string> bytes_;
  std::vector<uint8_t> special_, stop_;
  std::vector<int32_t> stop_ids_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_ids_;
  int max_token_bytes_ = 0;
  uint64_t uid_ = 0;
};

}  // namespace epserve::grammar
