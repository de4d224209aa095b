#include "model/v4/v4_config.h"

#include <nlohmann/json.hpp>

namespace epserve::v4 {

namespace {

using nlohmann::json;

class Reader {
 public:
  Reader(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  Status Error(const std::string& field, const std::string& what) const {
    return Status::InvalidArgument(where_ + ": " + field + " " + what);
  }

  // The first present spelling of the field; nullptr if none.
  const json* Find(const char* hf, const char* alt) const {
    if (j_.contains(hf)) return &j_[hf];
    if (alt != nullptr && j_.contains(alt)) return &j_[alt];
    return nullptr;
  }

  template <typename T>
  Status Int(const char* hf, const char* alt, T* out, bool required = true) const {
    const json* v = Find(hf, alt);
    if (v == nullptr) return required ? Error(hf, "is missing") : Status::Ok();
    if (!v->is_number_integer()) return Error(hf, "must be an integer, got " + v->dump());
    *out = static_cast<T>(v->get<int64_t>());
    return Status::Ok();
  }

  Status Real(const char* hf, const char* alt, double* out, bool required = true) const {
    const json* v = Find(hf, alt);
    if (v == nullptr) return required ? Error(hf, "is missing") : Status::Ok();
    if (!v->is_number()) return Error(hf, "must be a number, got " + v->dump());
    *out = v->get<double>();
    return Status::Ok();
  }

 private:
  const json& j_;
  std::string where_;
};

bool PowerOfTwo(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace

StatusOr<V4Config> ParseV4Config(const std::string& json_text, const std::string& where) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::InvalidArgument(where + ": not a JSON object");
  Reader r(j, where);
  if (!j.contains("model_type") || !j["model_type"].is_string())
    return r.Error("model_type", "is missing (want \"deepseek_v4\")");
  if (j["model_type"] != "deepseek_v4")
    return r.Error("model_type", "is " + j["model_type"].dump() + ", want \"deepseek_v4\"");
  V4Config c;
  RETURN_IF_ERROR(r.Int("vocab_size", nullptr, &c.vocab_size));
  RETURN_IF_ERROR(r.Int("hidden_size", "dim", &c.hidden_size));
  RETURN_IF_ERROR(r.Int("num_hidden_layers", "n_layers", &c.num_layers));
  RETURN_IF_ERROR(r.Int("num_nextn_predict_layers", "n_mtp_layers", &c.num_mtp_layers, false));
  RETURN_IF_ERROR(r.Int("num_attention_heads", "n_heads", &c.num_heads));
  RETURN_IF_ERROR(r.Int("head_dim", nullptr, &c.head_dim));
  RETURN_IF_ERROR(r.Int("qk_rope_head_dim", "rope_head_dim", &c.rope_dim));
  RETURN_IF_ERROR(r.Int("q_lora_rank", nullptr, &c.q_lora_rank));
  RETURN_IF_ERROR(r.Int("o_groups", nullptr, &c.o_groups));
  RETURN_IF_ERROR(r.Int("o_lora_rank", nullptr, &c.o_lora_rank));
  RETURN_IF_ERROR(r.Int("sliding_window", "window_size", &c.window));
  RETURN_IF_ERROR(r.Real("compress_rope_theta", nullptr, &c.compress_rope_theta));
  RETURN_IF_ERROR(r.Real("rope_theta", nullptr, &c.rope_theta, false));
  RETURN_IF_ERROR(r.Int("index_n_heads", nullptr, &c.index_heads));
  RETURN_IF_ERROR(r.Int("index_head_dim", nullptr, &c.index_dim));
  RETURN_IF_ERROR(r.Int("index_topk", nullptr, &c.index_topk));
  RETURN_IF_ERROR(r.Int("hc_mult", nullptr, &c.hc_mult));
  RETURN_IF_ERROR(r.Int("hc_sinkhorn_iters", nullptr, &c.hc_sinkhorn_iters));
  RETURN_IF_ERROR(r.Real("hc_eps", nullptr, &c.hc_eps, false));
  RETURN_IF_ERROR(r.Real("rms_norm_eps", "norm_eps", &c.rms_norm_eps, false));
  RETURN_IF_ERROR(r.Int("n_routed_experts", nullptr, &c.num_experts));
  RETURN_IF_ERROR(r.Int("num_experts_per_tok", "n_activated_experts", &c.experts_per_token));
  RETURN_IF_ERROR(r.Int("moe_intermediate_size", "moe_inter_dim", &c.moe_inter));
  RETURN_IF_ERROR(r.Int("num_hash_layers", "n_hash_layers", &c.num_hash_layers, false));
  RETURN_IF_ERROR(r.Real("routed_scaling_factor", "route_scale", &c.route_scale, false));
  RETURN_IF_ERROR(r.Real("swiglu_limit", nullptr, &c.swiglu_limit, false));
  RETURN_IF_ERROR(r.Int("max_position_embeddings", nullptr, &c.max_position_embeddings, false));

  int shared = 1;
  RETURN_IF_ERROR(r.Int("n_shared_experts", nullptr, &shared, false));
  if (shared != 1) return r.Error("n_shared_experts", "must be 1, got " + std::to_string(shared));
  if (const json* s = r.Find("scoring_func", "score_func");
      s != nullptr && (!s->is_string() || *s != "sqrtsoftplus"))
    return r.Error("scoring_func", "is " + s->dump() + ", V4 uses \"sqrtsoftplus\"");

  const json* rs = r.Find("rope_scaling", nullptr);
  if (rs != nullptr && !rs->is_null()) {
    if (!rs->is_object()) return r.Error("rope_scaling", "must be an object");
    Reader sr(*rs, where + ": rope_scaling");
    RETURN_IF_ERROR(sr.Real("factor", nullptr, &c.rope_factor, false));
    RETURN_IF_ERROR(
        sr.Int("original_max_position_embeddings", nullptr, &c.rope_original_len, false));
    RETURN_IF_ERROR(sr.Real("beta_fast", nullptr, &c.beta_fast, false));
    RETURN_IF_ERROR(sr.Real("beta_slow", nullptr, &c.beta_slow, false));
  } else {
    RETURN_IF_ERROR(r.Real("rope_factor", nullptr, &c.rope_factor, false));
    RETURN_IF_ERROR(r.Int("original_seq_len", nullptr, &c.rope_original_len, false));
  }

  const json* cr = r.Find("compress_ratios", nullptr);
  if (cr == nullptr) return r.Error("compress_ratios", "is missing");
  if (!cr->is_array()) return r.Error("compress_ratios", "must be an array");
  for (const json& v : *cr) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (1 << 20))
      return r.Error("compress_ratios", "has a bad entry " + v.dump());
    c.compress_ratios.push_back(static_cast<int>(v.get<int64_t>()));
  }

  auto positive = [&](const char* field, int64_t v) -> Status {
    return v > 0 ? Status::Ok() : r.Error(field, "must be positive, got " + std::to_string(v));
  };
  RETURN_IF_ERROR(positive("vocab_size", c.vocab_size));
  RETURN_IF_ERROR(positive("hidden_size", c.hidden_size));
  RETURN_IF_ERROR(positive("num_hidden_layers", c.num_layers));
  RETURN_IF_ERROR(positive("num_attention_heads", c.num_heads));
  RETURN_IF_ERROR(positive("head_dim", c.head_dim));
  RETURN_IF_ERROR(positive("qk_rope_head_dim", c.rope_dim));
  RETURN_IF_ERROR(positive("q_lora_rank", c.q_lora_rank));
  RETURN_IF_ERROR(positive("o_groups", c.o_groups));
  RETURN_IF_ERROR(positive("o_lora_rank", c.o_lora_rank));
  RETURN_IF_ERROR(positive("sliding_window", c.window));
  RETURN_IF_ERROR(positive("index_n_heads", c.index_heads));
  RETURN_IF_ERROR(positive("index_topk", c.index_topk));
  RETURN_IF_ERROR(positive("hc_mult", c.hc_mult));
  RETURN_IF_ERROR(positive("hc_sinkhorn_iters", c.hc_sinkhorn_iters));
  RETURN_IF_ERROR(positive("n_routed_experts", c.num_experts));
  RETURN_IF_ERROR(positive("num_experts_per_tok", c.experts_per_token));
  RETURN_IF_ERROR(positive("moe_intermediate_size", c.moe_inter));
  if (c.num_mtp_layers < 0) return r.Error("num_nextn_predict_layers", "must be >= 0");
  if (c.rope_dim % 2 != 0 || c.rope_dim > c.head_dim || c.rope_dim > c.index_dim)
    return r.Error("qk_rope_head_dim", "must be even and at most head_dim and index_head_dim");
  if ((c.head_dim - c.rope_dim) % 64 != 0)
    return r.Error("head_dim", "minus qk_rope_head_dim must be a multiple of 64 (FP8 blocks)");
  if (!PowerOfTwo(c.index_dim) || c.index_dim < 32)
    return r.Error("index_head_dim", "must be a power of two >= 32 (Hadamard, FP4 blocks)");
  if (c.num_heads % c.o_groups != 0) return r.Error("o_groups", "must divide num_attention_heads");
  if (c.experts_per_token > c.num_experts)
    return r.Error("num_experts_per_tok", "exceeds n_routed_experts");
  if (c.hidden_size % 32 != 0 || c.moe_inter % 32 != 0)
    return r.Error("hidden_size", "and moe_intermediate_size must be multiples of 32 (FP4 blocks)");
  if (c.num_hash_layers < 0 || c.num_hash_layers > c.num_layers)
    return r.Error("num_hash_layers", "must be in [0, num_hidden_layers]");
  if (static_cast<int64_t>(c.compress_ratios.size()) < c.num_layers + c.num_mtp_layers)
    return r.Error("compress_ratios", "has " + std::to_string(c.compress_ratios.size()) +
                                          " entries, fewer than layers + MTP layers");
  // FP8 activation scales as DeepSeek's act_quant makes them (power-of-two for "ue8m0"): the
  // expert-parallel dispatch rounds expert inputs so (docs/expert-parallelism.md).
  if (j.contains("quantization_config") && j["quantization_config"].is_object()) {
    const json& q = j["quantization_config"];
    c.ue8m0_scales = q.contains("scale_fmt") && q["scale_fmt"] == "ue8m0";
  }
  // The default stop ids of generation (an integer or a list).
  if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
    const json& e = j["eos_token_id"];
    auto add = [&](const json& x) -> Status {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= c.vocab_size)
        return r.Error("eos_token_id", "must be token ids in [0, vocab_size), got " + e.dump());
      c.eos_token_ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
      return Status::Ok();
    };
    if (e.is_array()) {
      for (const json& x : e) RETURN_IF_ERROR(add(x));
    } else {
      RETURN_IF_ERROR(add(e));
    }
  }
  return c;
}

}  // namespace epserve::v4
