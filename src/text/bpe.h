// The BPE model from tokenizer.json's "model": vocab, merges (the "a b" string form and the
// [a, b] array form), unk_token/fuse_unk, byte_fallback, ignore_merges,
// continuing_subword_prefix and end_of_word_suffix. Dropout is rejected (it is random).
//
// Encoding a word: one symbol per character, then the lowest-ranked adjacent pair is merged
// until none is left (a priority queue over pair ranks, as Hugging Face's word.rs does). Results
// are cached per word (a bounded map, cleared when full).
// Thread safety: EncodeWord may be called from many threads (the cache has its own lock).
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace epserve::text {

// A string-keyed hash map that can be probed with a string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Token ids (vocab and added tokens) are below this. The tokenizer keeps dense tables of
// max id + 1 entries, so without a bound one stray id in tokenizer.json would cost gigabytes at
// load; 2^22 is 16 times the largest vocabularies in use (~262k).
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 22;

class BpeModel {
 public:
  // `where` names the model in errors ("tokenizer.json: model").
  static StatusOr<std::unique_ptr<BpeModel>> Parse(const nlohmann::json& j,
                                                   const std::string& where);

  // Appends the ids of `word` (one pre-tokenized piece) to *ids.
  void EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;

  const TokenMap& vocab() const { return vocab_; }
  int32_t max_id() const { return max_id_; }

 private:
  BpeModel() = default;
  void Merge(std::string_view word, std::vector<int32_t>* ids) const;
  void AppendSymbol(std::string_view piece, std::vector<int32_t>* symbols) const;

  struct MergeTarget {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  TokenMap vocab_;
  std::unordered_map<uint64_t, MergeTarget> merges_;
  int32_t max_id_ = -1;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string prefix_;     // continuing_subword_prefix
  std::string suffix_;     // end_of_word_suffix
  int32_t byte_ids_[256];  // byte_fallback: <0xXX> ids (-1 if absent)

  static constexpr size_t kCacheCapacity = 1 << 16;
  static constexpr size_t kMaxCachedWordBytes = 256;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace epserve::text
