// The latent KV cache of MLA as the model sees it: per position and layer one row of
// [c_kv (kv_lora_rank) | k_pe (qk_rope_head_dim)] (SPEC §2) - never per-head K/V - stored in
// fixed-size blocks. A sequence owns a block table; its position s lives in block
// table[s / block_size], row s % block_size. Who allocates blocks, shares them between
// sequences (prefix reuse) and evicts them is the runtime's business (runtime/kv_block_pool.h);
// the model only reads and writes rows through a KvBlocks view and the block tables of the
// batch. That keeps model/ free of runtime/ (docs/architecture.md, "The cache seam").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/aligned_vector.h"
#include "base/status.h"
#include "kernels/mla_attention.h"

namespace epserve {

enum class KvDType { kF32, kBF16 };
const char* KvDTypeName(KvDType dtype);                   // "f32" | "bf16"
StatusOr<KvDType> ParseKvDType(const std::string& name);  // error names the value
inline int KvDTypeBytes(KvDType dtype) { return dtype == KvDType::kF32 ? 4 : 2; }

// A view of block storage, laid out [block][layer][row in block][row_width]: one layer's rows
// of a block are contiguous, so attention streams a block per layer. Owns nothing.
struct KvBlocks {
  int num_layers = 0, row_width = 0;
  int64_t block_size = 0;  // positions per block
  int64_t num_blocks = 0;
  KvDType dtype = KvDType::kF32;
  void* data = nullptr;

  int64_t ElementsPerBlock() const { return int64_t{num_layers} * block_size * row_width; }
  // Bytes one position occupies over all layers.
  int64_t BytesPerToken() const { return int64_t{num_layers} * row_width * KvDTypeBytes(dtype); }
  // The row of `position` (already mapped to its block) in `layer`, as element offset.
  int64_t RowOffset(int32_t block, int layer, int64_t offset_in_block) const {
    return block * ElementsPerBlock() + (int64_t{layer} * block_size + offset_in_block) * row_width;
  }
  kernels::MlaCacheView LayerView(int layer) const;
  // Stores a float row (rounding to bf16 when the cache is bf16).
  void WriteRow(int32_t block, int layer, int64_t offset_in_block, const float* row) const;
};

// Storage for KvBlocks (zero-initialised, 64-byte aligned).
class KvBlockStorage {
 public:
  KvBlockStorage(int num_layers, int row_width, int64_t block_size, int64_t num_blocks,
                 KvDType dtype);
  const KvBlocks& view() const { return view_; }

 private:
  AlignedVector<uint8_t> bytes_;
  KvBlocks view_;
};

// A fixed set of sequence slots, each with a contiguous capacity of max_positions (one block of
// that size per slot): the simple cache for tests, benchmarks and the kernel comparisons.
// Thread safety: none.
class LatentKvCache {
 public:
  LatentKvCache(int num_layers, int row_width, int num_slots, int64_t max_positions,
                KvDType dtype = KvDType::kF32);

  int num_slots() const { return static_cast<int>(lengths_.size()); }
  int64_t max_positions() const { return storage_.view().block_size; }
  int row_width() const { return storage_.view().row_width; }
  const KvBlocks& blocks() const { return storage_.view(); }
  // The block table of a slot (its one block).
  const int32_t* table(int slot) const { return &tables_[slot]; }
  // Positions already filled for a slot (the next token goes at this position).
  int64_t length(int slot) const { return lengths_[slot]; }
  void set_length(int slot, int64_t n) { lengths_[slot] = n; }
  int64_t BytesPerToken(int bytes_per_value) const {
    return static_cast<int64_t>(storage_.view().num_layers) * row_width() * bytes_per_value;
  }

 private:
  KvBlockStorage storage_;
  std::vector<int32_t> tables_;
  std::vector<int64_t> lengths_;
};

}  // namespace epserve
