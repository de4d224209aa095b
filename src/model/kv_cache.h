// The latent KV cache of MLA: per sequence slot and layer, one row of
// [c_kv (kv_lora_rank) | k_pe (qk_rope_head_dim)] per position (SPEC §2) - never per-head K/V.
// Storage is float32, contiguous per (slot, layer) so attention streams it; a slot's capacity
// is fixed when the cache is built. Thread safety: none; the engine step owns it.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace epserve {

class LatentKvCache {
 public:
  LatentKvCache(int num_layers, int row_width, int num_slots, int64_t max_positions);

  int num_slots() const { return num_slots_; }
  int64_t max_positions() const { return max_positions_; }
  int row_width() const { return row_width_; }
  // Rows [0, max_positions) of (slot, layer).
  float* Rows(int slot, int layer) {
    return data_.data() + (static_cast<int64_t>(slot) * num_layers_ + layer) * max_positions_ * row_width_;
  }
  // Positions already filled for a slot (the next token goes at this position).
  int64_t length(int slot) const { return lengths_[slot]; }
  void set_length(int slot, int64_t n) { lengths_[slot] = n; }
  // Bytes one token's cache occupies over all layers at `bytes_per_value`.
  int64_t BytesPerToken(int bytes_per_value) const {
    return static_cast<int64_t>(num_layers_) * row_width_ * bytes_per_value;
  }

 private:
  int num_layers_, row_width_, num_slots_;
  int64_t max_positions_;
  std::vector<float> data_;
  std::vector<int64_t> lengths_;
};

}  // namespace epserve
