#include "model/tensor_names.h"

namespace epserve {

std::string LayerPrefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }

namespace {

void AddMlp(std::vector<TensorSpec>& out, const std::string& prefix, int64_t hidden, int64_t width,
            int layer, int expert) {
  out.push_back({prefix + "gate_proj.weight", {width, hidden}, TensorRole::kLinear, layer, expert});
  out.push_back({prefix + "up_proj.weight", {width, hidden}, TensorRole::kLinear, layer, expert});
  out.push_back({prefix + "down_proj.weight", {hidden, width}, TensorRole::kLinear, layer, expert});
}

void AddDecoderLayer(std::vector<TensorSpec>& out, const ModelConfig& c, int layer, bool moe) {
  const std::string p = LayerPrefix(layer);
  const int64_t h = c.hidden_size, heads = c.num_attention_heads;
  out.push_back({p + "input_layernorm.weight", {h}, TensorRole::kNorm, layer});
  out.push_back({p + "post_attention_layernorm.weight", {h}, TensorRole::kNorm, layer});
  const std::string a = p + "self_attn.";
  if (c.q_lora_rank > 0) {
    out.push_back({a + "q_a_proj.weight", {c.q_lora_rank, h}, TensorRole::kLinear, layer});
    out.push_back({a + "q_a_layernorm.weight", {c.q_lora_rank}, TensorRole::kNorm, layer});
    out.push_back({a + "q_b_proj.weight",
                   {heads * c.qk_head_dim(), c.q_lora_rank},
                   TensorRole::kLinear,
                   layer});
  } else {
    out.push_back({a + "q_proj.weight", {heads * c.qk_head_dim(), h}, TensorRole::kLinear, layer});
  }
  out.push_back({a + "kv_a_proj_with_mqa.weight", {c.kv_a_dim(), h}, TensorRole::kLinear, layer});
  out.push_back({a + "kv_a_layernorm.weight", {c.kv_lora_rank}, TensorRole::kNorm, layer});
  out.push_back({a + "kv_b_proj.weight",
                 {heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank},
                 TensorRole::kLinear,
                 layer});
  out.push_back({a + "o_proj.weight", {h, heads * c.v_head_dim}, TensorRole::kLinear, layer});
  if (c.sparse.enabled()) {
    // DeepSeek-V3.2's lightning indexer. As released: wq_b and wk FP8, weights_proj BF16.
    const std::string x = a + "indexer.";
    const int64_t d = c.sparse.index_head_dim, n = c.sparse.index_n_heads;
    out.push_back({x + "wq_b.weight", {n * d, c.q_lora_rank}, TensorRole::kLinear, layer});
    out.push_back({x + "wk.weight", {d, h}, TensorRole::kLinear, layer});
    out.push_back({x + "k_norm.weight", {d}, TensorRole::kNorm, layer});
    out.push_back({x + "k_norm.bias", {d}, TensorRole::kBias, layer});
    out.push_back({x + "weights_proj.weight", {n, h}, TensorRole::kRouter, layer});
  }
  if (!moe) {
    AddMlp(out, p + "mlp.", h, c.intermediate_size, layer, -1);
    return;
  }
  out.push_back({p + "mlp.gate.weight", {c.n_routed_experts, h}, TensorRole::kRouter, layer});
  if (c.topk_method == kernels::TopkMethod::kNoauxTc)
    out.push_back(
        {p + "mlp.gate.e_score_correction_bias", {c.n_routed_experts}, TensorRole::kBias, layer});
  for (int e = 0; e < c.n_routed_experts; ++e)
    AddMlp(out, p + "mlp.experts." + std::to_string(e) + ".", h, c.moe_intermediate_size, layer, e);
  if (c.n_shared_experts > 0)
    AddMlp(out, p + "mlp.shared_experts.", h,
           static_cast<int64_t>(c.moe_intermediate_size) * c.n_shared_experts, layer, -1);
}

}  // namespace

std::vector<TensorSpec> ExpectedTensors(const ModelConfig& c) {
  std::vector<TensorSpec> out;
  const int64_t h = c.hidden_size;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, h}, TensorRole::kEmbedding});
  for (int l = 0; l < c.num_hidden_layers; ++l) AddDecoderLayer(out, c, l, c.IsMoeLayer(l));
  out.push_back({"model.norm.weight", {h}, TensorRole::kNorm});
  out.push_back({"lm_head.weight", {c.vocab_size, h}, TensorRole::kEmbedding});
  for (int i = 0; i < c.num_nextn_predict_layers; ++i) {
    const int l = c.num_hidden_layers + i;
    const std::string p = LayerPrefix(l);
    out.push_back({p + "enorm.weight", {h}, TensorRole::kNorm, l});
    out.push_back({p + "hnorm.weight", {h}, TensorRole::kNorm, l});
    out.push_back({p + "eh_proj.weight", {h, 2 * h}, TensorRole::kLinear, l});
    out.push_back({p + "embed_tokens.weight", {c.vocab_size, h}, TensorRole::kEmbedding, l});
    out.push_back({p + "shared_head.norm.weight", {h}, TensorRole::kNorm, l});
    out.push_back({p + "shared_head.head.weight", {c.vocab_size, h}, TensorRole::kEmbedding, l});
    AddDecoderLayer(out, c, l, c.IsMoeLayer(l));
  }
  return out;
}

}  // namespace epserve
