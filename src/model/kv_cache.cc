#include "model/kv_cache.h"

#include <cstring>

#include "tensor/dtype.h"

namespace epserve {

const char* KvDTypeName(KvDType dtype) { return dtype == KvDType::kF32 ? "f32" : "bf16"; }

StatusOr<KvDType> ParseKvDType(const std::string& name) {
  if (name == "f32") return KvDType::kF32;
  if (name == "bf16") return KvDType::kBF16;
  return Status::InvalidArgument("--kv-dtype must be f32 or bf16, got \"" + name + "\"");
}

int IndexKeyBytes(const ModelConfig& c) {
  if (!c.sparse.enabled()) return 0;
  const int d = c.sparse.index_head_dim;
  return d + 4 * ((d + 127) / 128);
}

int KvRowWidth(const ModelConfig& c, KvDType dtype) {
  const int bytes = KvDTypeBytes(dtype), extra = IndexKeyBytes(c);
  return c.kv_a_dim() + (extra + bytes - 1) / bytes;
}

kernels::MlaCacheView KvBlocks::LayerView(int layer) const {
  const int64_t offset = int64_t{layer} * block_size * row_width;
  const void* base = dtype == KvDType::kF32
                         ? static_cast<const void*>(static_cast<const float*>(data) + offset)
                         : static_cast<const void*>(static_cast<const uint16_t*>(data) + offset);
  return {.base = base,
          .block_stride = ElementsPerBlock(),
          .block_size = block_size,
          .type = dtype == KvDType::kF32 ? kernels::CacheType::kF32 : kernels::CacheType::kBF16,
          .row_stride = row_width};
}

void KvBlocks::WriteRow(int32_t block, int layer, int64_t offset_in_block, const float* row) const {
  const int64_t off = RowOffset(block, layer, offset_in_block);
  const int n = latent_width();
  if (dtype == KvDType::kF32) {
    std::memcpy(static_cast<float*>(data) + off, row, n * sizeof(float));
  } else {
    uint16_t* dst = static_cast<uint16_t*>(data) + off;
    for (int i = 0; i < n; ++i) dst[i] = F32ToBf16(row[i]);
  }
}

KvBlockStorage::KvBlockStorage(int num_layers, int row_width, int64_t block_size,
                               int64_t num_blocks, KvDType dtype, int index_bytes)
    : view_{.num_layers = num_layers,
            .row_width = row_width,
            .index_bytes = index_bytes,
            .block_size = block_size,
            .num_blocks = num_blocks,
            .dtype = dtype} {
  bytes_.assign(static_cast<size_t>(view_.ElementsPerBlock() * num_blocks * KvDTypeBytes(dtype)),
                0);
  view_.data = bytes_.data();
}

LatentKvCache::LatentKvCache(int num_layers, int row_width, int num_slots, int64_t max_positions,
                             KvDType dtype, int index_bytes)
    : storage_(num_layers, row_width, max_positions, num_slots, dtype, index_bytes),
      tables_(num_slots),
      lengths_(num_slots, 0) {
  for (int s = 0; s < num_slots; ++s) tables_[s] = s;
}

LatentKvCache LatentKvCache::For(const ModelConfig& config, int num_layers, int num_slots,
                                 int64_t max_positions, KvDType dtype) {
  return LatentKvCache(num_layers, KvRowWidth(config, dtype), num_slots, max_positions, dtype,
                       IndexKeyBytes(config));
}

}  // namespace epserve
