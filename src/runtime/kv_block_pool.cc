#include "runtime/kv_block_pool.h"

#include <algorithm>

#include "base/check.h"

namespace epserve {

KvBlockPool::KvBlockPool(const KvBlockPoolOptions& o) : options_(o), entries_(o.num_blocks) {
  if (o.external.data != nullptr) {
    const KvBlocks& e = o.external;
    CHECK(e.num_layers == o.num_layers && e.row_width == o.row_width &&
          e.index_bytes == o.index_bytes && e.block_size == o.block_size &&
          e.num_blocks == o.num_blocks && e.dtype == o.dtype)
        << "external KV storage of another shape than the pool";
    view_ = e;
  } else {
    storage_ = std::make_unique<KvBlockStorage>(o.num_layers, o.row_width, o.block_size,
                                                o.num_blocks, o.dtype, o.index_bytes);
    view_ = storage_->view();
  }
  free_.reserve(o.num_blocks);
  for (int64_t b = o.num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

uint64_t KvBlockPool::Key(uint64_t parent, std::span<const int32_t> tokens) {
  // FNV-1a over the parent key and the tokens, then a final avalanche (splitmix64). 0 is
  // reserved for "no parent".
  uint64_t h = 0xcbf29ce484222325ull ^ parent;
  for (int32_t t : tokens) {
    h ^= static_cast<uint32_t>(t);
    h *= 0x100000001b3ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h == 0 ? 1 : h;
}

std::vector<int32_t> KvBlockPool::MatchPrefix(std::span<const int32_t> tokens, int64_t max_blocks,
                                              std::vector<uint64_t>* keys) {
  std::vector<int32_t> out;
  const int64_t bs = block_size();
  uint64_t parent = 0;
  for (int64_t i = 0; i < max_blocks && (i + 1) * bs <= static_cast<int64_t>(tokens.size()); ++i) {
    auto block_tokens = tokens.subspan(i * bs, bs);
    const uint64_t key = Key(parent, block_tokens);
    auto it = by_key_.find(key);
    if (it == by_key_.end()) break;
    Entry& e = entries_[it->second];
    if (e.parent != parent || !std::equal(e.tokens.begin(), e.tokens.end(), block_tokens.begin()))
      break;
    if (e.refs++ == 0) lru_.erase(e.lru_pos);
    out.push_back(it->second);
    if (keys) keys->push_back(key);
    parent = key;
  }
  return out;
}

int32_t KvBlockPool::Allocate() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();
    lru_.pop_front();
    Uncache(b);
  } else {
    return -1;
  }
  CHECK(entries_[b].refs == 0);
  entries_[b].refs = 1;
  return b;
}

void KvBlockPool::Uncache(int32_t b) {
  Entry& e = entries_[b];
  by_key_.erase(e.key);
  e.cached = false;
  e.tokens.clear();
}

void KvBlockPool::Release(int32_t b) {
  Entry& e = entries_[b];
  CHECK(e.refs > 0) << "block " << b << " released more often than referenced";
  if (--e.refs > 0) return;
  if (e.cached) {
    lru_.push_back(b);
    e.lru_pos = std::prev(lru_.end());
  } else {
    free_.push_back(b);
  }
}

uint64_t KvBlockPool::Commit(int32_t b, uint64_t parent, std::span<const int32_t> tokens) {
  CHECK(static_cast<int64_t>(tokens.size()) == block_size());
  const uint64_t key = Key(parent, tokens);
  Entry& e = entries_[b];
  CHECK(e.refs > 0);
  if (e.cached) return e.key;  // already registered (e.g. matched from the cache)
  if (by_key_.count(key) == 0) {
    by_key_[key] = b;
    e.cached = true;
    e.key = key;
    e.parent = parent;
    e.tokens.assign(tokens.begin(), tokens.end());
  }
  return key;
}

}  // namespace epserve
