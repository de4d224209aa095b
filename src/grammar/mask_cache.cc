#include "grammar/mask_cache.h"

#include <bit>
#include <cstring>

namespace epserve::grammar {

MaskCache::MaskCache(int32_t num_ids, size_t capacity_bytes)
    : num_ids_(num_ids),
      num_words_((static_cast<size_t>(num_ids) + 63) / 64),
      capacity_bytes_(capacity_bytes) {}

uint64_t MaskCache::Hash(const std::vector<uint32_t>& key) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (uint32_t x : key) h = (h ^ x) * 0x100000001b3ULL;
  return h;
}

void MaskCache::Expand(const Entry& e, uint64_t* words) const {
  switch (e.form) {
    case Form::kBits:
      std::memcpy(words, e.bits.data(), num_words_ * sizeof(uint64_t));
      return;
    case Form::kAllowed:
      std::memset(words, 0, num_words_ * sizeof(uint64_t));
      for (int32_t id : e.ids) words[id >> 6] |= uint64_t{1} << (id & 63);
      return;
    case Form::kDisallowed:
      std::memset(words, 0xFF, num_words_ * sizeof(uint64_t));
      if (num_ids_ % 64 != 0) words[num_words_ - 1] = (uint64_t{1} << (num_ids_ % 64)) - 1;
      for (int32_t id : e.ids) words[id >> 6] &= ~(uint64_t{1} << (id & 63));
      return;
  }
}

bool MaskCache::Find(const std::vector<uint32_t>& key, uint64_t* words) {
  const uint64_t h = Hash(key);
  std::lock_guard<std::mutex> lock(mu_);
  auto [lo, hi] = index_.equal_range(h);
  for (auto it = lo; it != hi; ++it) {
    if (it->second->key == key) {
      lru_.splice(lru_.begin(), lru_, it->second);
      Expand(lru_.front(), words);
      return true;
    }
  }
  return false;
}

void MaskCache::EvictOne() {
  auto last = std::prev(lru_.end());
  auto [a, b] = index_.equal_range(last->hash);
  for (auto it = a; it != b; ++it) {
    if (it->second == last) {
      index_.erase(it);
      break;
    }
  }
  bytes_ -= last->bytes;
  lru_.pop_back();
}

void MaskCache::Insert(std::vector<uint32_t> key, const uint64_t* words) {
  const uint64_t h = Hash(key);
  // The smallest form (outside the lock: it reads only the caller's words).
  int64_t allowed = 0;
  for (size_t w = 0; w < num_words_; ++w) allowed += std::popcount(words[w]);
  const int64_t disallowed = num_ids_ - allowed;
  Entry e{.hash = h, .key = std::move(key), .form = Form::kBits};
  const size_t bitmap_bytes = num_words_ * sizeof(uint64_t);
  if (static_cast<size_t>(std::min(allowed, disallowed)) * sizeof(int32_t) < bitmap_bytes) {
    const bool list_allowed = allowed <= disallowed;
    e.form = list_allowed ? Form::kAllowed : Form::kDisallowed;
    e.ids.reserve(static_cast<size_t>(list_allowed ? allowed : disallowed));
    for (size_t w = 0; w < num_words_; ++w) {
      uint64_t x = list_allowed ? words[w] : ~words[w];
      while (x != 0) {
        const int32_t id = static_cast<int32_t>(w * 64 + std::countr_zero(x));
        if (id >= num_ids_) break;
        e.ids.push_back(id);
        x &= x - 1;
      }
    }
  } else {
    e.bits.assign(words, words + num_words_);
  }
  e.bytes = sizeof(Entry) + e.key.size() * sizeof(uint32_t) + e.ids.size() * sizeof(int32_t) +
            e.bits.size() * sizeof(uint64_t) + 32;
  std::lock_guard<std::mutex> lock(mu_);
  auto [lo, hi] = index_.equal_range(h);
  for (auto it = lo; it != hi; ++it) {
    if (it->second->key == e.key) return;  // another request computed it meanwhile
  }
  bytes_ += e.bytes;
  lru_.push_front(std::move(e));
  index_.emplace(h, lru_.begin());
  while (bytes_ > capacity_bytes_ && lru_.size() > 1) EvictOne();
}

size_t MaskCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace epserve::grammar
