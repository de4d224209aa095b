// DeepSeek-V4's weights bound by name (docs/v4-model.md §2). Projections are WeightViews for
// kernels::MatMul: BF16 views into the checkpoint's mapping, F8_E4M3 views with float scales
// owned here (the UE8M0 bytes 2^(b - 127) decoded once), F32 matrices copied into owned aligned
// storage. FP4 routed experts (I8, two e2m1 per byte, low nibble first, a UE8M0 scale per 32
// inputs) are dequantized at load into owned BF16 (lossless: every e2m1 x 2^e is a BF16).
// Vectors (norms, sinks, biases, ape, HC base/scale) are owned float copies.
// Lifetime: a V4Weights holds the checkpoint mapping; views stay valid while it lives.
// Thread safety: immutable after Load. The MTP modules' tensors are not bound (see v4_model.h).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "base/aligned_vector.h"
#include "base/status.h"
#include "model/v4/v4_config.h"
#include "model/v4/v4_safetensors.h"
#include "tensor/weight_view.h"

namespace epserve::v4 {

struct V4Compressor {
  WeightView wkv, wgate;    // [c d, D]
  std::vector<float> ape;   // [ratio, c d]
  std::vector<float> norm;  // [d]
};

struct V4Hc {
  WeightView fn;             // [(2 + M) M, M D] F32 (or [M, M D] for the head)
  std::vector<float> base;   // [(2 + M) M] (head: [M])
  std::vector<float> scale;  // [3] (head: [1])
};

struct V4Expert {
  WeightView w1, w2, w3;  // [F, D], [D, F], [F, D]
};

struct V4Layer {
  int ratio = 0;
  std::vector<float> attn_norm, ffn_norm;
  V4Hc hc_attn, hc_ffn;
  WeightView wq_a, wq_b, wkv, wo_a, wo_b;
  std::vector<float> q_norm, kv_norm, attn_sink;
  V4Compressor compressor;        // ratio != 0
  WeightView index_wq_b;          // ratio 4: [Hi Di, Q]
  WeightView index_weights_proj;  // ratio 4: [Hi, D]
  V4Compressor index_compressor;  // ratio 4, d = Di
  WeightView gate;                // [E, D]
  std::vector<int32_t> tid2eid;   // hash layers: [V, k]
  std::vector<float> gate_bias;   // other layers: [E]
  std::vector<V4Expert> experts;
  V4Expert shared;
};

class V4Weights {
 public:
  static StatusOr<std::unique_ptr<V4Weights>> Load(const std::string& dir);

  const V4Config& config() const { return config_; }
  const std::vector<V4Layer>& layers() const { return layers_; }
  const WeightView& embed() const { return embed_; }  // [V, D]
  const WeightView& head() const { return head_; }    // [V, D]
  const std::vector<float>& norm() const { return norm_; }
  const V4Hc& hc_head() const { return hc_head_; }

 private:
  friend class V4Binder;
  V4Config config_;
  std::unique_ptr<V4Checkpoint> ck_;
  std::vector<V4Layer> layers_;
  WeightView embed_, head_;
  std::vector<float> norm_;
  V4Hc hc_head_;
  // Owned storage behind views (deques: growing never moves existing elements).
  std::deque<std::vector<float>> scales_;
  std::deque<AlignedVector<float>> f32_;
  std::deque<std::vector<uint16_t>> bf16_;
};

}  // namespace epserve::v4
