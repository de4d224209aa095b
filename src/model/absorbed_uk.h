// W_uk transposed, per layer and head, for the fast path's absorbed query product.
//
// MLA absorbs W_uk (the k_nope rows of kv_b, [nope, kv_lora] per head) into the query:
// q_abs[t, h] = q_nope[t, h] · W_uk[h], a product with W_uk *not* transposed, which the exact
// path computes with MatMulT. The fast kernels (AMX, AVX512-BF16) only multiply by a transposed
// weight (y = x · Wᵀ), so `--compute fast` keeps a copy of W_ukᵀ [kv_lora, nope] per head and runs
// the product as an ordinary MatMul on it. An FP8 head that starts on a 128-row scale block
// (every head of DeepSeek-V3's layout: nope + v = 256) stays FP8 with its block scales
// transposed, so the copy is as large as W_uk and holds the same values; one that starts inside a
// block (some heads of the small test presets) is stored as bfloat16 of weight · scale, exactly
// what the fast kernels round it to. BF16 and F32 heads are transposed as they are.
#pragma once

#include <cstdint>
#include <vector>

#include "base/aligned_vector.h"
#include "model/config.h"
#include "model/weights.h"
#include "tensor/weight_view.h"

namespace epserve {

class AbsorbedUk {
 public:
  AbsorbedUk() = default;
  // W_ukᵀ of heads [h0, h0 + heads) of every decoder layer of `w` (main and MTP).
  AbsorbedUk(const ModelConfig& c, const ModelWeights& w, int h0, int heads);

  bool empty() const { return views_.empty(); }
  // W_ukᵀ of `layer` (as ModelWeights::Layer) and local head `head`: [kv_lora, nope].
  const WeightView& Get(int layer, int head) const {
    return views_[static_cast<size_t>(layer) * heads_ + head];
  }

 private:
  int heads_ = 0;
  AlignedVector<uint8_t> data_;
  std::vector<float> scales_;
  std::vector<WeightView> views_;
};

}  // namespace epserve
