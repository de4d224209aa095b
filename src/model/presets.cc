#include "model/synthetic.h"

namespace epserve {

namespace {

// V3 layout scaled down: q_lora, noaux_tc sigmoid routing with groups and bias, one MTP layer,
// YaRN. Dimensions are chosen so FP8 tiles are both full and partial (144, 192, 64 wide).
ModelConfig Tiny() {
  ModelConfig c;
  c.model_type = "deepseek_v3";
  c.vocab_size = 1024;
  c.bos_token_id = 0;  // DeepSeek-V3's <｜begin▁of▁sentence｜> and <｜end▁of▁sentence｜>
  c.eos_token_ids = {1};
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.moe_intermediate_size = 64;
  c.num_hidden_layers = 4;
  c.num_nextn_predict_layers = 1;
  c.num_attention_heads = 4;
  c.q_lora_rank = 128;
  c.kv_lora_rank = 128;
  c.qk_nope_head_dim = 32;
  c.qk_rope_head_dim = 16;
  c.v_head_dim = 32;
  c.n_routed_experts = 32;
  c.n_shared_experts = 1;
  c.num_experts_per_tok = 4;
  c.n_group = 8;
  c.topk_group = 4;
  c.topk_method = kernels::TopkMethod::kNoauxTc;
  c.scoring_func = kernels::ScoringFunc::kSigmoid;
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 2.5;
  c.first_k_dense_replace = 1;
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  // mscale != mscale_all_dim so the cos/sin scaling path is exercised too.
  c.rope_scaling = YarnScaling{.enabled = true,
                               .factor = 4.0,
                               .original_max_position_embeddings = 1024,
                               .beta_fast = 32.0,
                               .beta_slow = 1.0,
                               .mscale = 1.0,
                               .mscale_all_dim = 0.8};
  return c;
}

// Exactly the V2-Lite recipe: no q_lora, softmax + greedy top-6 without normalization,
// 2 shared experts, YaRN with mscale = mscale_all_dim = 0.707, no MTP.
ModelConfig TinyV2() {
  ModelConfig c = Tiny();
  c.model_type = "deepseek_v2";
  c.num_nextn_predict_layers = 0;
  c.q_lora_rank = 0;
  c.n_routed_experts = 32;
  c.n_shared_experts = 2;
  c.num_experts_per_tok = 6;
  c.n_group = 1;
  c.topk_group = 1;
  c.topk_method = kernels::TopkMethod::kGreedy;
  c.scoring_func = kernels::ScoringFunc::kSoftmax;
  c.norm_topk_prob = false;
  c.routed_scaling_factor = 1.0;
  c.rope_scaling.mscale = 0.707;
  c.rope_scaling.mscale_all_dim = 0.707;
  return c;
}

// V3 shapes scaled down to ~2.4 GB of FP8 routed experts (4.8 GB BF16): 256 experts of width
// 512 in 8 groups, top-8, 6 MoE layers: larger than any cache, so decode streams from DRAM.
ModelConfig Bench() {
  ModelConfig c = Tiny();
  c.vocab_size = 32000;
  c.hidden_size = 1024;
  c.intermediate_size = 2816;
  c.moe_intermediate_size = 512;
  c.num_hidden_layers = 7;
  c.num_nextn_predict_layers = 0;
  c.num_attention_heads = 8;
  c.q_lora_rank = 384;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.n_routed_experts = 256;
  c.num_experts_per_tok = 8;
  c.n_group = 8;
  c.topk_group = 4;
  c.rope_scaling.mscale_all_dim = 1.0;
  return c;
}

// The real configurations of the family, for measuring the GPU at real shapes on weights made
// in device memory (cuda::DeviceWeights::Synthetic, `epserve bench decode --device cuda`).
// Their checkpoints are large (v2-lite ~31 GB in BF16, v3 ~690 GB in FP8): `make-model` writes
// them only when asked to, and nothing in the tests does.

// deepseek-ai/DeepSeek-V2-Lite's config.json (15.7 B parameters).
ModelConfig V2Lite() {
  ModelConfig c;
  c.model_type = "deepseek_v2";
  c.vocab_size = 102400;
  c.bos_token_id = 100000;
  c.eos_token_ids = {100001};
  c.hidden_size = 2048;
  c.intermediate_size = 10944;
  c.moe_intermediate_size = 1408;
  c.num_hidden_layers = 27;
  c.num_nextn_predict_layers = 0;
  c.num_attention_heads = 16;
  c.q_lora_rank = 0;  // null: plain q_proj
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.n_routed_experts = 64;
  c.n_shared_experts = 2;
  c.num_experts_per_tok = 6;
  c.n_group = 1;
  c.topk_group = 1;
  c.topk_method = kernels::TopkMethod::kGreedy;
  c.scoring_func = kernels::ScoringFunc::kSoftmax;
  c.norm_topk_prob = false;
  c.routed_scaling_factor = 1.0;
  c.first_k_dense_replace = 1;
  c.max_position_embeddings = 163840;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.rope_scaling = YarnScaling{.enabled = true,
                               .factor = 40.0,
                               .original_max_position_embeddings = 4096,
                               .beta_fast = 32.0,
                               .beta_slow = 1.0,
                               .mscale = 0.707,
                               .mscale_all_dim = 0.707};
  return c;
}

// deepseek-ai/DeepSeek-V3's config.json (671 B parameters, 37 B active; SPEC §2).
ModelConfig V3() {
  ModelConfig c;
  c.model_type = "deepseek_v3";
  c.vocab_size = 129280;
  c.bos_token_id = 0;
  c.eos_token_ids = {1};
  c.hidden_size = 7168;
  c.intermediate_size = 18432;
  c.moe_intermediate_size = 2048;
  c.num_hidden_layers = 61;
  c.num_nextn_predict_layers = 1;
  c.num_attention_heads = 128;
  c.q_lora_rank = 1536;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.n_routed_experts = 256;
  c.n_shared_experts = 1;
  c.num_experts_per_tok = 8;
  c.n_group = 8;
  c.topk_group = 4;
  c.topk_method = kernels::TopkMethod::kNoauxTc;
  c.scoring_func = kernels::ScoringFunc::kSigmoid;
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 2.5;
  c.first_k_dense_replace = 3;
  c.max_position_embeddings = 163840;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.rope_scaling = YarnScaling{.enabled = true,
                               .factor = 40.0,
                               .original_max_position_embeddings = 4096,
                               .beta_fast = 32.0,
                               .beta_slow = 1.0,
                               .mscale = 1.0,
                               .mscale_all_dim = 1.0};
  return c;
}

// deepseek-ai/DeepSeek-V3.2(-Exp)'s config.json: V3 plus DeepSeek Sparse Attention (64 indexer
// heads of 128, each query attending to its best 2048 positions) and power-of-two (UE8M0)
// activation scales.
ModelConfig V32() {
  ModelConfig c = V3();
  c.model_type = "deepseek_v32";
  c.sparse = SparseAttentionConfig{.index_n_heads = 64, .index_head_dim = 128, .index_topk = 2048};
  c.ue8m0_scales = true;
  return c;
}

// Tiny with V3.2's indexer, index_topk shrunk to 16 so prompts both shorter and longer than it
// are cheap; 8 indexer heads (of 128, as released) so all-zero scores (every head's ReLU at 0,
// 1 in 2^8) seldom tie at the top-k boundary.
ModelConfig TinyV32() {
  ModelConfig c = Tiny();
  c.model_type = "deepseek_v32";
  c.sparse = SparseAttentionConfig{.index_n_heads = 8, .index_head_dim = 128, .index_topk = 16};
  c.ue8m0_scales = true;
  return c;
}

}  // namespace

std::vector<std::string> PresetNames() {
  return {"tiny", "tiny-v2", "tiny-v32", "bench", "v2-lite", "v3", "v32"};
}

StatusOr<ModelConfig> PresetConfig(const std::string& preset) {
  if (preset == "tiny") return Tiny();
  if (preset == "tiny-v2") return TinyV2();
  if (preset == "bench") return Bench();
  if (preset == "v2-lite") return V2Lite();
  if (preset == "v3") return V3();
  if (preset == "tiny-v32") return TinyV32();
  if (preset == "v32") return V32();
  return Status::InvalidArgument("unknown preset \"" + preset +
                                 "\" (want tiny, tiny-v2, tiny-v32, bench, v2-lite, v3 or v32)");
}

StatusOr<ModelConfig> WithLayers(const ModelConfig& config, int num_layers) {
  if (num_layers < 1 || num_layers > config.num_hidden_layers)
    return Status::InvalidArgument("--layers " + std::to_string(num_layers) +
                                   ": the model has layers 1.." +
                                   std::to_string(config.num_hidden_layers));
  ModelConfig c = config;
  c.num_hidden_layers = num_layers;
  return c;
}

}  // namespace epserve
