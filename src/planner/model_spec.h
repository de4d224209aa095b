// The planner's view of a DeepSeek-V3-family model: the config.json fields that set kernel
// shapes, weight bytes and KV-cache bytes (SPEC §2). Parsed here with nlohmann_json so the
// planner does not depend on the engine's io/model layers.
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "planner/hardware.h"

namespace epserve::planner {

// How the checkpoint stores its linear-layer weights.
enum class WeightFormat {
  kFp8Block,  // float8 e4m3 + one fp32 scale per block x block tile (quantization_config)
  kBf16,
};

struct ModelSpec {
  std::string name;
  int hidden_size = 0;
  int num_hidden_layers = 0;
  int first_k_dense_replace = 0;
  int intermediate_size = 0;  // dense MLP width
  int n_routed_experts = 0;
  int n_shared_experts = 0;
  int num_experts_per_tok = 0;
  int moe_intermediate_size = 0;
  int n_group = 1;
  int topk_group = 1;
  int num_attention_heads = 0;
  int q_lora_rank = 0;  // 0 when config.json has null (V2-Lite: q = W_q x directly)
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  int vocab_size = 0;
  int num_nextn_predict_layers = 0;  // MTP layers
  WeightFormat weight_format = WeightFormat::kBf16;
  int weight_block_size = 128;  // FP8 scale tile edge

  // Invariants the rest of the planner relies on (all sizes positive, experts split into groups).
  Status Validate() const;

  int NumMoeLayers() const { return num_hidden_layers - first_k_dense_replace; }
  int NumDenseLayers() const { return first_k_dense_replace; }
  // Latent KV cache of the main layers: layers x (kv_lora_rank + qk_rope_head_dim) x 2 bytes
  // (BF16). 70,272 for DeepSeek-V3.
  int64_t KvBytesPerToken() const;
  // Including the MTP layers, which keep their own latent cache.
  int64_t KvBytesPerTokenWithMtp() const;
  // Bytes per weight element of the quantized linear layers (1 for FP8, 2 for BF16).
  double LinearElementBytes() const { return weight_format == WeightFormat::kFp8Block ? 1 : 2; }
  Precision LinearPrecision() const {
    return weight_format == WeightFormat::kFp8Block ? Precision::kFp8 : Precision::kBf16;
  }
  // Stored bytes of one [rows x cols] linear weight, including FP8 block scales.
  double LinearWeightBytes(double rows, double cols) const;
};

// Parameter counts (elements, not bytes) of the main model plus its MTP layers.
struct ParamCounts {
  double attention = 0;       // all MLA projections, all layers
  double dense_mlp = 0;       // dense layers' MLPs
  double routed_experts = 0;  // all routed experts, all MoE layers
  double shared_experts = 0;
  double gates = 0;
  double embedding = 0;  // embed_tokens + lm_head
  double mtp = 0;        // MTP layers (their experts included), excluding shared embedding/head
  double MainModel() const {
    return attention + dense_mlp + routed_experts + shared_experts + gates + embedding;
  }
  // Parameters a token activates in the main model (top-k routed + shared + dense parts).
  double active_per_token = 0;
};

StatusOr<ModelSpec> ModelSpecFromConfig(const nlohmann::json& config, const std::string& name);
// Reads a Hugging Face config.json.
StatusOr<ModelSpec> LoadModelConfig(const std::string& path);
ParamCounts CountParams(const ModelSpec& model);

}  // namespace epserve::planner
