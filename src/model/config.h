// ModelConfig: the fields of a Hugging Face DeepseekV2/V3 config.json that define the
// computation (SPEC §2). Parse validates every field once and names config.json and the field
// in each error; derived sizes are methods.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/gate.h"

namespace epserve {

struct YarnScaling {
  bool enabled = false;
  double factor = 1.0;
  int original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
};

// DeepSeek Sparse Attention (DeepSeek-V3.2, `model_type: deepseek_v32`): a lightning indexer
// per layer scores every past position for each query, and MLA attends to only the best
// index_topk of them (docs/checkpoint-format.md, "DeepSeek-V3.2"). Off when index_topk is 0.
struct SparseAttentionConfig {
  int index_n_heads = 0;
  int index_head_dim = 0;  // 128: one FP8 scale per head and per key, as DeepSeek's kernel
  int index_topk = 0;      // positions each query attends to; 0: dense MLA
  bool enabled() const { return index_topk > 0; }
};

struct ModelConfig {
  std::string model_type = "deepseek_v3";
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;      // dense MLP layers
  int moe_intermediate_size = 0;  // each routed expert; shared = this * n_shared_experts
  int num_hidden_layers = 0;
  int num_nextn_predict_layers = 0;  // MTP layers, stored at index num_hidden_layers + i
  int num_attention_heads = 0;
  int q_lora_rank = 0;  // 0 when config says null (V2-Lite: plain q_proj)
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  int n_routed_experts = 0;
  int n_shared_experts = 0;
  int num_experts_per_tok = 0;
  int n_group = 1;
  int topk_group = 1;
  kernels::TopkMethod topk_method = kernels::TopkMethod::kNoauxTc;
  kernels::ScoringFunc scoring_func = kernels::ScoringFunc::kSigmoid;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  int first_k_dense_replace = 0;
  int moe_layer_freq = 1;
  int max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  YarnScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool fp8 = false;                // quantization_config: fp8 e4m3, 128x128 weight blocks
  // quantization_config.scale_fmt "ue8m0" (V3.1 and later): activation quantization rounds
  // each block's scale up to a power of two, as DeepSeek's act_quant does.
  bool ue8m0_scales = false;
  SparseAttentionConfig sparse;  // index_n_heads, index_head_dim, index_topk
  int bos_token_id = -1;           // -1: not given
  std::vector<int> eos_token_ids;  // eos_token_id (an id or a list); generation stops there

  // Parses and validates config.json text; `path` is used in error messages.
  static StatusOr<ModelConfig> Parse(const std::string& json_text, const std::string& path);
  // Checks ranges and consistency (also used for configs built in code).
  Status Validate(const std::string& path) const;
  // The config.json a Hugging Face checkpoint of this model carries.
  std::string ToJson() const;

  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int kv_a_dim() const { return kv_lora_rank + qk_rope_head_dim; }  // one latent cache row
  bool IsMoeLayer(int layer) const {
    return n_routed_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
  }
  // 1/sqrt(qk_head_dim), times mscale(mscale_all_dim)^2 with YaRN (HF DeepseekV3 semantics).
  double SoftmaxScale() const;
  kernels::GateOptions GateOpts() const;
};

// The first `num_layers` decoder layers of `config`: num_hidden_layers becomes num_layers and
// everything else stays (first_k_dense_replace, MTP modules): DeepSeek-V3 with 4 layers is its 3
// dense layers and its first MoE layer, at the real shapes. InvalidArgument outside
// [1, num_hidden_layers]. (Defined in presets.cc.)
StatusOr<ModelConfig> WithLayers(const ModelConfig& config, int num_layers);

// yarn_get_mscale from the reference code: 0.1 * m * ln(scale) + 1 for scale > 1, else 1.
double YarnMscale(double scale, double m);

}  // namespace epserve
