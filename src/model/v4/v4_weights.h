// DeepSeek-V4's weights bound by name (docs/v4-model.md §2), read with io/checkpoint.h.
// Projections are WeightViews for kernels::MatMul: BF16 views into the checkpoint's mapping,
// F8_E4M3 views with float scales owned here (the UE8M0 bytes 2^(b - 127) decoded once), F32
// matrices copied into owned aligned storage. FP4 routed experts (I8 [rows, cols / 2], two e2m1
// per byte, low nibble first, + F8_E8M0 [rows, cols / 32]) are kF4E2M1 views whose data and
// scale_ue8m0 point into the mapping (tensor/weight_view.h), a quarter of the bytes of BF16;
// V4LoadOptions::Fp4::kBf16 instead dequantizes them at load into owned BF16 (lossless: every
// e2m1 x 2^e is a BF16, so kernels::MatMul gives the same bits either way).
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
#include "io/checkpoint.h"
#include "model/experts.h"
#include "model/v4/v4_config.h"
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
  // Routed (by expert id) and shared experts: gate = w1 [F, D], up = w3 [F, D], down = w2
  // [D, F], swiglu_limit from the config.
  std::vector<MlpWeights> experts;
  MlpWeights shared;
};

struct V4LoadOptions {
  // How the FP4 routed experts are held: kNative (kF4E2M1 views into the mapping) or kBf16
  // (dequantized at load into owned BF16, four times the bytes; for comparisons).
  enum class Fp4 { kNative, kBf16 };
  Fp4 fp4 = Fp4::kNative;
};

class V4Weights : public ExpertTable {
 public:
  static StatusOr<std::unique_ptr<V4Weights>> Load(const std::string& dir,
                                                   const V4LoadOptions& options = {});

  const V4Config& config() const { return config_; }
  // ExpertTable: layer l's routed experts (what the expert backends run).
  const std::vector<MlpWeights>& RoutedExperts(int layer) const override {
    return layers_[layer].experts;
  }
  const std::vector<V4Layer>& layers() const { return layers_; }
  const WeightView& embed() const { return embed_; }  // [V, D]
  const WeightView& head() const { return head_; }    // [V, D]
  const std::vector<float>& norm() const { return norm_; }
  const V4Hc& hc_head() const { return hc_head_; }
  // The mapped checkpoint the views point into.
  const Checkpoint& checkpoint() const { return *ck_; }

 private:
  friend class V4Binder;
  V4Config config_;
  V4LoadOptions options_;
  std::unique_ptr<Checkpoint> ck_;
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
