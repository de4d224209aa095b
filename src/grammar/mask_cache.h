// MaskCache: token masks of one (Grammar, TokenVocab) pair keyed by the exact matcher state
// (Matcher::State::Key), LRU-bounded by bytes. A hit is an exact key comparison, never a hash
// match alone. Masks are stored in the smallest of three forms: the allowed ids (structural
// states allow a few), the disallowed ids (string states allow nearly all), or the bitmap.
// Thread safety: all methods take the cache's lock; share across requests.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace epserve::grammar {

class MaskCache {
 public:
  // num_ids: vocabulary size; capacity_bytes: the bound on keys + masks held.
  MaskCache(int32_t num_ids, size_t capacity_bytes);

  // Writes the cached mask for `key` into words ((num_ids + 63) / 64 entries); false on a miss.
  bool Find(const std::vector<uint32_t>& key, uint64_t* words);
  void Insert(std::vector<uint32_t> key, const uint64_t* words);
  size_t bytes() const;

 private:
  enum class Form : uint8_t { kBits, kAllowed, kDisallowed };
  struct Entry {
    uint64_t hash;
    std::vector<uint32_t> key;
    Form form;
    std::vector<uint64_t> bits;  // kBits
    std::vector<int32_t> ids;    // kAllowed / kDisallowed
    size_t bytes;
  };
  static uint64_t Hash(const std::vector<uint32_t>& key);
  void Expand(const Entry& e, uint64_t* words) const;
  void EvictOne();

  const int32_t num_ids_;
  const size_t num_words_, capacity_bytes_;
  mutable std::mutex mu_;
  size_t bytes_ = 0;
  std::list<Entry> lru_;  // most recent first
  std::unordered_multimap<uint64_t, std::list<Entry>::iterator> index_;
};

}  // namespace epserve::grammar
