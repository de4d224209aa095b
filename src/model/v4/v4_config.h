// DeepSeek-V4's config.json (model_type "deepseek_v4"; docs/v4-model.md §1), parsed and checked
// once. Field names are the Hugging Face ones; ModelArgs spellings (dim, n_layers, ...) are
// accepted where DeepSeek's inference/config.json uses them. Derived sizes are members.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace epserve::v4 {

struct V4Config {
  int64_t vocab_size = 0;            // V
  int64_t hidden_size = 0;           // D
  int num_layers = 0;                // L (main layers)
  int num_mtp_layers = 0;            // MTP modules (loaded, not run: see v4_model.h)
  int num_heads = 0;                 // H
  int64_t head_dim = 0;              // Dh: q heads and the KV entry
  int64_t rope_dim = 0;              // R: the last R dims of every head are rotary
  int64_t q_lora_rank = 0;           // Q
  int o_groups = 0;                  // G
  int64_t o_lora_rank = 0;           // Ro
  int window = 0;                    // W, the current token included
  std::vector<int> compress_ratios;  // per layer (L + MTP entries): 0, 4, or another ratio
  double compress_rope_theta = 0;
  double rope_theta = 10000;
  double rope_factor = 1;         // YaRN (compressed layers only)
  int64_t rope_original_len = 0;  // 0: no YaRN
  double beta_fast = 32, beta_slow = 1;
  int index_heads = 0;    // Hi
  int64_t index_dim = 0;  // Di
  int index_topk = 0;     // K
  int hc_mult = 0;        // M residual streams
  int hc_sinkhorn_iters = 0;
  double hc_eps = 1e-6;
  double rms_norm_eps = 1e-6;
  int num_experts = 0;        // E
  int experts_per_token = 0;  // k
  int64_t moe_inter = 0;      // F
  int num_hash_layers = 0;
  double route_scale = 1;
  double swiglu_limit = 0;  // 0: no clamp
  // quantization_config.scale_fmt "ue8m0": FP8 activation scales are powers of two.
  bool ue8m0_scales = false;
  std::vector<int32_t> eos_token_ids;  // eos_token_id: generation's default stop ids
  // The longest sequence; absent from config.json: V4's 1M-token context.
  int64_t max_position_embeddings = int64_t{1} << 20;

  int64_t HcMixWidth() const { return int64_t{2 + hc_mult} * hc_mult; }
  int64_t QWidth() const { return int64_t{num_heads} * head_dim; }
  int64_t OGroupIn() const { return QWidth() / o_groups; }
  int Ratio(int layer) const { return compress_ratios[layer]; }
  // Compressor channels per token: 2 (overlapping groups) for ratio 4, else 1.
  static int CompressFactor(int ratio) { return ratio == 4 ? 2 : 1; }
};

// Parses config.json text; every error names the field. `where` prefixes messages.
StatusOr<V4Config> ParseV4Config(const std::string& json_text, const std::string& where);

}  // namespace epserve::v4
