// One DP group's paged latent KV cache: the block storage, which blocks are free, who holds
// them (reference counts), and the prefix cache. The prefix cache keys every full block by a
// hash chain: key(block i) = H(key(block i-1), the block's tokens), so a key names the whole
// prefix up to the block's end, and two requests share a block only when every token before it
// matches (checked exactly, not only by hash). Blocks nobody references but that hold a cached
// prefix are kept, and evicted least-recently-released first when a free block is needed.
// The verb set follows SGLang's radix cache: MatchPrefix, Allocate, Commit, Release.
// Thread safety: none; the engine's step owns it.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "model/kv_cache.h"

namespace epserve {

struct KvBlockPoolOptions {
  int num_layers = 0, row_width = 0;
  int index_bytes = 0;      // KvBlocks::index_bytes (DeepSeek-V3.2's indexer key per row)
  int64_t block_size = 64;  // positions per block
  int64_t num_blocks = 0;
  KvDType dtype = KvDType::kF32;
  // Storage allocated elsewhere (a device backend's memory: cuda::DeviceKvStorage), used instead
  // of host memory when its data is set. REQUIRES: it has the shape above.
  KvBlocks external;
};

class KvBlockPool {
 public:
  explicit KvBlockPool(const KvBlockPoolOptions& options);

  const KvBlocks& blocks() const { return view_; }
  int64_t block_size() const { return options_.block_size; }
  int64_t num_blocks() const { return options_.num_blocks; }
  // Blocks Allocate can hand out now: free ones plus unreferenced cached ones.
  int64_t num_available() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  int64_t num_referenced() const { return num_blocks() - num_available(); }
  int64_t num_cached() const { return static_cast<int64_t>(by_key_.size()); }

  // The longest run of cached blocks that begins `tokens` (at most max_blocks of them), each
  // now referenced once more by the caller. keys receives their chain keys.
  std::vector<int32_t> MatchPrefix(std::span<const int32_t> tokens, int64_t max_blocks,
                                   std::vector<uint64_t>* keys);
  // A block referenced once by the caller: a free one, else the least recently released
  // cached one (dropped from the prefix cache). -1 when every block is referenced.
  int32_t Allocate();
  // Drops one reference. At zero a cached block becomes evictable; an uncached one, free.
  void Release(int32_t block);
  // Records that `block` (referenced by the caller) now holds a full block of `tokens`
  // following the prefix whose key is `parent` (0 for the first block), and returns its key.
  // When the same prefix is already cached in another block, that one stays the cached copy.
  uint64_t Commit(int32_t block, uint64_t parent, std::span<const int32_t> tokens);

 private:
  struct Entry {
    int32_t refs = 0;
    bool cached = false;
    uint64_t key = 0, parent = 0;
    std::vector<int32_t> tokens;  // exact content, checked on every match
    std::list<int32_t>::iterator lru_pos;
  };
  static uint64_t Key(uint64_t parent, std::span<const int32_t> tokens);
  void Uncache(int32_t block);

  KvBlockPoolOptions options_;
  std::unique_ptr<KvBlockStorage> storage_;  // null with external storage
  KvBlocks view_;
  std::vector<Entry> entries_;
  std::vector<int32_t> free_;  // stack: the most recently freed block is reused first
  std::list<int32_t> lru_;     // unreferenced cached blocks, least recently released first
  std::unordered_map<uint64_t, int32_t> by_key_;
};

}  // namespace epserve
