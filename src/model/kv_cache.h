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
#include "model/config.h"

namespace epserve {

enum class KvDType { kF32, kBF16 };
const char* KvDTypeName(KvDType dtype);                   // "f32" | "bf16"
StatusOr<KvDType> ParseKvDType(const std::string& name);  // error names the value
inline int KvDTypeBytes(KvDType dtype) { return dtype == KvDType::kF32 ? 4 : 2; }

// Bytes of DeepSeek-V3.2's indexer key per position and layer: index_head_dim FP8 values and
// one float32 scale per 128 of them (132 for 128 values); 0 without sparse attention.
int IndexKeyBytes(const ModelConfig& config);
// Elements of one cache row of `config` stored as `dtype`: the latent row [c_kv | k_pe], and
// with sparse attention the indexer key's bytes packed after it (IndexKeyBytes / element size;
// 132 bytes are 66 bf16 or 33 f32 elements). One row per position and layer holds everything
// a position contributes, so block allocation, prefix reuse and preemption need no change.
int KvRowWidth(const ModelConfig& config, KvDType dtype);

// A view of block storage, laid out [block][layer][row in block][row_width]: one layer's rows
// of a block are contiguous, so attention streams a block per layer. Owns nothing.
// A row is the latent row (latent_width() elements of the dtype), then index_bytes raw bytes.
struct KvBlocks {
  int num_layers = 0, row_width = 0;
  int index_bytes = 0;     // the indexer key at the end of each row (IndexKeyBytes); 0: none
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
  // Elements of the latent row [c_kv | k_pe] (row_width without the indexer key).
  int latent_width() const { return row_width - index_bytes / KvDTypeBytes(dtype); }
  kernels::MlaCacheView LayerView(int layer) const;
  // Stores a float latent row of latent_width() values (rounding to bf16 when the cache is bf16).
  void WriteRow(int32_t block, int layer, int64_t offset_in_block, const float* row) const;
  // The index_bytes bytes of a row's indexer key.
  uint8_t* IndexKey(int32_t block, int layer, int64_t offset_in_block) const {
    return static_cast<uint8_t*>(data) +
           (RowOffset(block, layer, offset_in_block) + latent_width()) * KvDTypeBytes(dtype);
  }
};

// Storage for KvBlocks (zero-initialised, 64-byte aligned).
class KvBlockStorage {
 public:
  KvBlockStorage(int num_layers, int row_width, int64_t block_size, int64_t num_blocks,
                 KvDType dtype, int index_bytes = 0);
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
                KvDType dtype = KvDType::kF32, int index_bytes = 0);
  // The cache `config` needs (KvRowWidth, IndexKeyBytes), with `num_layers` layers.
  static LatentKvCache For(const ModelConfig& config, int num_layers, int num_slots,
                           int64_t max_positions, KvDType dtype = KvDType::kF32);

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
