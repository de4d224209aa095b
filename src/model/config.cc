#include "model/config.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/json.h"

namespace epserve {

namespace {

using nlohmann::json;

// Whether the JSON integer v is representable as T.
template <typename T>
bool FitsIn(const json& v) {
  if (v.is_number_unsigned())
    return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  const int64_t x = v.get<int64_t>();
  return x >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
         (x < 0 ||
          static_cast<uint64_t>(x) <= static_cast<uint64_t>(std::numeric_limits<T>::max()));
}
template <typename T>
std::string RangeText() {
  return "an integer in [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
         std::to_string(std::numeric_limits<T>::max()) + "]";
}

class FieldReader {
 public:
  FieldReader(const json& j, const std::string& path) : j_(j), path_(path) {}
  Status status() const { return status_; }

  template <typename T>
  void Get(const char* name, T* out, bool required) {
    if (!status_.ok()) return;
    if (!j_.contains(name) || j_[name].is_null()) {
      if (required) status_ = Status::InvalidArgument(path_ + ": missing field \"" + name + "\"");
      return;
    }
    const json& v = j_[name];
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) return Fail(name, "a boolean", v);
      *out = v.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      if (!v.is_number_integer()) return Fail(name, "an integer", v);
      // Range-checked: nlohmann's get<int>() would wrap 2^40 into a small or negative int.
      if (!FitsIn<T>(v)) return Fail(name, RangeText<T>().c_str(), v);
      *out = v.get<T>();
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!v.is_number()) return Fail(name, "a number", v);
      *out = v.get<T>();
    } else {
      if (!v.is_string()) return Fail(name, "a string", v);
      *out = v.get<std::string>();
    }
  }

 private:
  void Fail(const char* name, const char* want, const json& v) {
    status_ = Status::InvalidArgument(path_ + ": field \"" + name + "\" must be " + want +
                                      ", got " + v.dump());
  }
  const json& j_;
  std::string path_;
  Status status_;
};

// The model families epserve runs: config.json's model_type and its architectures entry.
struct Family {
  const char* model_type;
  const char* architecture;
};
constexpr Family kFamilies[] = {{"deepseek_v2", "DeepseekV2ForCausalLM"},
                                {"deepseek_v3", "DeepseekV3ForCausalLM"},
                                {"deepseek_v32", "DeepseekV32ForCausalLM"}};

std::string SupportedFamilies() {
  std::string s;
  for (const Family& f : kFamilies)
    s += std::string(s.empty() ? "" : ", ") + f.model_type + " (" + f.architecture + ")";
  return s;
}

// model_type and architectures (docs/checkpoint-format.md, "Model families"): each names a
// supported family and they agree. Without model_type the architectures entry says which
// family; a config with neither is read as deepseek_v3, as every config was before both were
// checked (the fields read define the computation either way).
Status ReadFamily(const json& j, const std::string& path, std::string* model_type) {
  std::vector<std::string> archs;
  if (j.contains("architectures") && !j["architectures"].is_null()) {
    const json& a = j["architectures"];
    bool ok = a.is_array();
    for (size_t i = 0; ok && i < a.size(); ++i) {
      ok = a[i].is_string();
      if (ok) archs.push_back(a[i].get<std::string>());
    }
    if (!ok)
      return Status::InvalidArgument(
          path + ": field \"architectures\" must be a list of strings, got " + a.dump());
  }
  const Family* family = nullptr;
  if (j.contains("model_type") && !j["model_type"].is_null()) {
    if (!j["model_type"].is_string())
      return Status::InvalidArgument(path + ": field \"model_type\" must be a string, got " +
                                     j["model_type"].dump());
    *model_type = j["model_type"].get<std::string>();
    for (const Family& f : kFamilies)
      if (*model_type == f.model_type) family = &f;
    if (family == nullptr)
      return Status::InvalidArgument(path + ": model_type \"" + *model_type +
                                     "\" is not supported (supported: " + SupportedFamilies() +
                                     ")");
  } else if (!archs.empty()) {
    for (const Family& f : kFamilies)
      if (archs[0] == f.architecture) family = &f;
    if (family == nullptr)
      return Status::InvalidArgument(path + ": architectures entry \"" + archs[0] +
                                     "\" is not supported and there is no model_type (supported: " +
                                     SupportedFamilies() + ")");
    *model_type = family->model_type;
  } else {
    *model_type = "deepseek_v3";
    return Status::Ok();
  }
  for (const std::string& a : archs)
    if (a != family->architecture)
      return Status::InvalidArgument(
          path + ": architectures entry \"" + a + "\" contradicts model_type \"" + *model_type +
          "\" (want " + family->architecture + "; supported: " + SupportedFamilies() + ")");
  return Status::Ok();
}

// YaRN in either spelling: `rope_scaling` ({"type" or "rope_type": "yarn", ...}) or the
// `rope_parameters` of configs saved by current transformers ({"rope_type": "yarn" or
// "default", "rope_theta", ...}; "default" is plain RoPE). *theta (rope_parameters only) gets
// its rope_theta when it holds one.
Status ReadRope(const json& rs, const std::string& path, const char* field, YarnScaling* out,
                std::optional<double>* theta) {
  if (!rs.is_object())
    return Status::InvalidArgument(path + ": field \"" + field + "\" must be an object or null");
  const bool params = theta != nullptr;
  std::string type;
  FieldReader rr(rs, path + ": " + field);
  rr.Get("type", &type, false);
  if (type.empty()) rr.Get("rope_type", &type, false);
  RETURN_IF_ERROR(rr.status());
  *out = YarnScaling{};
  if (!(params && type == "default")) {
    if (type != "yarn")
      return Status::InvalidArgument(path + ": " + field + (params ? ".rope_type" : ".type") +
                                     " \"" + type + "\" is not supported (want yarn" +
                                     (params ? " or default)" : ")"));
    out->enabled = true;
    rr.Get("factor", &out->factor, true);
    rr.Get("original_max_position_embeddings", &out->original_max_position_embeddings, true);
    rr.Get("beta_fast", &out->beta_fast, false);
    rr.Get("beta_slow", &out->beta_slow, false);
    rr.Get("mscale", &out->mscale, false);
    rr.Get("mscale_all_dim", &out->mscale_all_dim, false);
  }
  if (params && rs.contains("rope_theta") && !rs["rope_theta"].is_null()) {
    double t = 0;
    rr.Get("rope_theta", &t, true);
    *theta = t;
  }
  return rr.status();
}

// The first setting in which two YaRN configurations differ; empty when they agree.
std::string RopeDifference(const YarnScaling& a, const YarnScaling& b) {
  if (a.enabled != b.enabled) return "the type (yarn or none)";
  if (!a.enabled) return "";
  if (a.factor != b.factor) return "factor";
  if (a.original_max_position_embeddings != b.original_max_position_embeddings)
    return "original_max_position_embeddings";
  if (a.beta_fast != b.beta_fast) return "beta_fast";
  if (a.beta_slow != b.beta_slow) return "beta_slow";
  if (a.mscale != b.mscale) return "mscale";
  if (a.mscale_all_dim != b.mscale_all_dim) return "mscale_all_dim";
  return "";
}

}  // namespace

double YarnMscale(double scale, double m) {
  return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
}

double ModelConfig::SoftmaxScale() const {
  double s = 1.0 / std::sqrt(static_cast<double>(qk_head_dim()));
  if (rope_scaling.enabled && rope_scaling.mscale_all_dim != 0.0) {
    double m = YarnMscale(rope_scaling.factor, rope_scaling.mscale_all_dim);
    s *= m * m;
  }
  return s;
}

kernels::GateOptions ModelConfig::GateOpts() const {
  return kernels::GateOptions{.scoring = scoring_func,
                              .method = topk_method,
                              .num_experts = n_routed_experts,
                              .top_k = num_experts_per_tok,
                              .num_groups = n_group,
                              .topk_groups = topk_group,
                              .norm_topk_prob = norm_topk_prob,
                              .routed_scaling_factor = static_cast<float>(routed_scaling_factor)};
}

StatusOr<ModelConfig> ModelConfig::Parse(const std::string& text, const std::string& path) {
  ASSIGN_OR_RETURN(json j, ParseJson(text, path));
  if (!j.is_object())
    return Status::InvalidArgument(path + ": expected a JSON object, got " + j.type_name());
  ModelConfig c;
  RETURN_IF_ERROR(ReadFamily(j, path, &c.model_type));
  FieldReader r(j, path);
  r.Get("vocab_size", &c.vocab_size, true);
  r.Get("hidden_size", &c.hidden_size, true);
  r.Get("intermediate_size", &c.intermediate_size, true);
  r.Get("moe_intermediate_size", &c.moe_intermediate_size, true);
  r.Get("num_hidden_layers", &c.num_hidden_layers, true);
  r.Get("num_nextn_predict_layers", &c.num_nextn_predict_layers, false);
  r.Get("num_attention_heads", &c.num_attention_heads, true);
  r.Get("q_lora_rank", &c.q_lora_rank, false);  // null -> 0 (no q compression)
  r.Get("kv_lora_rank", &c.kv_lora_rank, true);
  r.Get("qk_nope_head_dim", &c.qk_nope_head_dim, true);
  r.Get("qk_rope_head_dim", &c.qk_rope_head_dim, true);
  r.Get("v_head_dim", &c.v_head_dim, true);
  r.Get("n_routed_experts", &c.n_routed_experts, true);
  r.Get("n_shared_experts", &c.n_shared_experts, false);
  r.Get("num_experts_per_tok", &c.num_experts_per_tok, true);
  r.Get("n_group", &c.n_group, false);
  r.Get("topk_group", &c.topk_group, false);
  std::string topk_method = "greedy", scoring = "softmax", act = "silu";
  r.Get("topk_method", &topk_method, false);
  r.Get("scoring_func", &scoring, false);
  r.Get("hidden_act", &act, false);
  r.Get("norm_topk_prob", &c.norm_topk_prob, false);
  r.Get("routed_scaling_factor", &c.routed_scaling_factor, false);
  r.Get("first_k_dense_replace", &c.first_k_dense_replace, false);
  r.Get("moe_layer_freq", &c.moe_layer_freq, false);
  r.Get("max_position_embeddings", &c.max_position_embeddings, true);
  r.Get("rms_norm_eps", &c.rms_norm_eps, false);
  r.Get("rope_theta", &c.rope_theta, false);
  r.Get("index_n_heads", &c.sparse.index_n_heads, false);
  r.Get("index_head_dim", &c.sparse.index_head_dim, false);
  r.Get("index_topk", &c.sparse.index_topk, false);
  r.Get("tie_word_embeddings", &c.tie_word_embeddings, false);
  RETURN_IF_ERROR(r.status());
  if (j.contains("bos_token_id") && !j["bos_token_id"].is_null()) {
    if (!j["bos_token_id"].is_number_integer() || !FitsIn<int>(j["bos_token_id"]))
      return Status::InvalidArgument(path + ": bos_token_id must be an integer in [" +
                                     std::to_string(INT_MIN) + ", " + std::to_string(INT_MAX) +
                                     "], got " + j["bos_token_id"].dump());
    c.bos_token_id = j["bos_token_id"].get<int>();
  }
  if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
    const json& e = j["eos_token_id"];
    auto is_int = [](const json& x) { return x.is_number_integer() && FitsIn<int>(x); };
    bool ok = is_int(e) || e.is_array();
    if (is_int(e)) c.eos_token_ids.push_back(e.get<int>());
    if (e.is_array())
      for (const json& x : e) {
        ok = ok && is_int(x);
        if (is_int(x)) c.eos_token_ids.push_back(x.get<int>());
      }
    if (!ok)
      return Status::InvalidArgument(path +
                                     ": eos_token_id must be an integer or a list of integers");
  }

  if (topk_method == "noaux_tc")
    c.topk_method = kernels::TopkMethod::kNoauxTc;
  else if (topk_method == "greedy")
    c.topk_method = kernels::TopkMethod::kGreedy;
  else if (topk_method == "group_limited_greedy")
    c.topk_method = kernels::TopkMethod::kGroupLimitedGreedy;
  else
    return Status::InvalidArgument(
        path + ": field \"topk_method\" must be noaux_tc, greedy or group_limited_greedy, got \"" +
        topk_method + "\"");
  if (scoring == "sigmoid")
    c.scoring_func = kernels::ScoringFunc::kSigmoid;
  else if (scoring == "softmax")
    c.scoring_func = kernels::ScoringFunc::kSoftmax;
  else
    return Status::InvalidArgument(
        path + ": field \"scoring_func\" must be sigmoid or softmax, got \"" + scoring + "\"");
  if (act != "silu")
    return Status::InvalidArgument(path + ": field \"hidden_act\" must be silu, got \"" + act +
                                   "\"");

  // RoPE: rope_theta and rope_scaling, or rope_parameters holding both; where a config has
  // both spellings they must agree (a null rope_scaling counts as absent).
  auto given = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  YarnScaling scaling, params;
  std::optional<double> params_theta;
  if (given("rope_scaling"))
    RETURN_IF_ERROR(ReadRope(j["rope_scaling"], path, "rope_scaling", &scaling, nullptr));
  if (given("rope_parameters"))
    RETURN_IF_ERROR(
        ReadRope(j["rope_parameters"], path, "rope_parameters", &params, &params_theta));
  if (given("rope_scaling") && given("rope_parameters")) {
    if (const std::string diff = RopeDifference(scaling, params); !diff.empty())
      return Status::InvalidArgument(path + ": rope_scaling and rope_parameters disagree on " +
                                     diff + ": " + j["rope_scaling"].dump() + " vs " +
                                     j["rope_parameters"].dump());
  }
  c.rope_scaling = given("rope_scaling") ? scaling : params;
  if (params_theta) {
    if (given("rope_theta") && *params_theta != c.rope_theta)
      return Status::InvalidArgument(path + ": rope_theta " + j["rope_theta"].dump() +
                                     " and rope_parameters.rope_theta " +
                                     j["rope_parameters"]["rope_theta"].dump() + " disagree");
    c.rope_theta = *params_theta;
  }
  if (j.contains("quantization_config") && !j["quantization_config"].is_null()) {
    const json& q = j["quantization_config"];
    std::string method, fmt = "e4m3";
    FieldReader qr(q, path + ": quantization_config");
    qr.Get("quant_method", &method, true);
    qr.Get("fmt", &fmt, false);
    std::string scale_fmt;
    if (q.contains("scale_fmt") && !q["scale_fmt"].is_null()) qr.Get("scale_fmt", &scale_fmt, true);
    RETURN_IF_ERROR(qr.status());
    if (!scale_fmt.empty() && scale_fmt != "ue8m0")
      return Status::InvalidArgument(path + ": quantization_config.scale_fmt \"" + scale_fmt +
                                     "\" is not supported (want ue8m0 or none)");
    c.ue8m0_scales = scale_fmt == "ue8m0";
    if (method != "fp8" || fmt != "e4m3")
      return Status::InvalidArgument(path + ": quantization_config " + method + "/" + fmt +
                                     " is not supported (want fp8/e4m3)");
    if (q.contains("weight_block_size") && q["weight_block_size"] != json::array({128, 128}))
      return Status::InvalidArgument(path + ": quantization_config.weight_block_size " +
                                     q["weight_block_size"].dump() +
                                     " is not supported (want [128, 128])");
    c.fp8 = true;
  }
  RETURN_IF_ERROR(c.Validate(path));
  return c;
}

Status ModelConfig::Validate(const std::string& path) const {
  auto bad = [&](const std::string& what) { return Status::InvalidArgument(path + ": " + what); };
  if (vocab_size <= 0 || hidden_size <= 0 || num_hidden_layers <= 0 || num_attention_heads <= 0)
    return bad(
        "vocab_size, hidden_size, num_hidden_layers and num_attention_heads must be positive");
  if (kv_lora_rank <= 0 || qk_nope_head_dim <= 0 || v_head_dim <= 0 || qk_rope_head_dim <= 0 ||
      qk_rope_head_dim % 2)
    return bad(
        "kv_lora_rank, qk_nope_head_dim, v_head_dim must be positive and qk_rope_head_dim positive "
        "and even");
  if (q_lora_rank < 0) return bad("q_lora_rank must be null or positive");
  for (int e : eos_token_ids)
    if (e < 0 || e >= vocab_size)
      return bad("eos_token_id " + std::to_string(e) + " is outside the vocabulary");
  if (num_nextn_predict_layers < 0) return bad("num_nextn_predict_layers must be >= 0");
  if (moe_layer_freq != 1)
    return bad("moe_layer_freq " + std::to_string(moe_layer_freq) + " is not supported (want 1)");
  if (first_k_dense_replace < 0 || (first_k_dense_replace > 0 && intermediate_size <= 0))
    return bad("first_k_dense_replace needs a positive intermediate_size");
  if (n_routed_experts > 0) {
    if (n_routed_experts > 1024) return bad("n_routed_experts > 1024 is not supported");
    if (moe_intermediate_size <= 0) return bad("moe_intermediate_size must be positive");
    if (num_experts_per_tok <= 0 || num_experts_per_tok > n_routed_experts)
      return bad("num_experts_per_tok must be in [1, n_routed_experts]");
    if (n_group <= 0 || n_group > 256 || n_routed_experts % n_group)
      return bad("n_group must divide n_routed_experts (got n_group " + std::to_string(n_group) +
                 ")");
    if (topk_group <= 0 || topk_group > n_group) return bad("topk_group must be in [1, n_group]");
    if (topk_method != kernels::TopkMethod::kGreedy &&
        topk_group * (n_routed_experts / n_group) < num_experts_per_tok)
      return bad("topk_group groups hold fewer experts than num_experts_per_tok");
    if (topk_method == kernels::TopkMethod::kNoauxTc &&
        scoring_func != kernels::ScoringFunc::kSigmoid)
      return bad("topk_method noaux_tc needs scoring_func sigmoid");
  }
  if (n_shared_experts < 0) return bad("n_shared_experts must be >= 0");
  if (sparse.index_topk < 0) return bad("index_topk must be >= 0");
  if (sparse.enabled()) {
    const int d = sparse.index_head_dim;
    if (sparse.index_n_heads <= 0)
      return bad("index_topk > 0 needs a positive index_n_heads, got " +
                 std::to_string(sparse.index_n_heads));
    // DeepSeek's indexer kernel (fp8_index) takes one scale per head and key: 128 values.
    if (d != 128 || d < qk_rope_head_dim)
      return bad("index_head_dim must be 128 (one FP8 scale per indexer head, as DeepSeek-V3.2) "
                 "and at least qk_rope_head_dim, got " +
                 std::to_string(d));
    if (q_lora_rank <= 0) return bad("index_topk > 0 needs q_lora_rank (the indexer reads q's latent)");
  }
  if (tie_word_embeddings) return bad("tie_word_embeddings true is not supported");
  if (rope_scaling.enabled &&
      (rope_scaling.factor <= 0 || rope_scaling.original_max_position_embeddings <= 0))
    return bad("rope_scaling.factor and original_max_position_embeddings must be positive");
  // Values that parse but make every logit NaN or meaningless (a JSON 1e999 reads as inf).
  auto text = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return std::string(buf);
  };
  auto positive = [&](const char* name, double v) -> Status {
    if (std::isfinite(v) && v > 0) return Status::Ok();
    return bad(std::string("field \"") + name + "\" must be a positive finite number, got " +
               text(v));
  };
  RETURN_IF_ERROR(positive("rms_norm_eps", rms_norm_eps));
  RETURN_IF_ERROR(positive("rope_theta", rope_theta));
  RETURN_IF_ERROR(positive("routed_scaling_factor", routed_scaling_factor));
  if (max_position_embeddings < 1) return bad("field \"max_position_embeddings\" must be positive");
  if (rope_scaling.enabled) {
    RETURN_IF_ERROR(positive("rope_scaling.factor", rope_scaling.factor));
    RETURN_IF_ERROR(positive("rope_scaling.beta_fast", rope_scaling.beta_fast));
    RETURN_IF_ERROR(positive("rope_scaling.beta_slow", rope_scaling.beta_slow));
    for (auto [name, v] : {std::pair{"rope_scaling.mscale", rope_scaling.mscale},
                           std::pair{"rope_scaling.mscale_all_dim", rope_scaling.mscale_all_dim}})
      if (!std::isfinite(v) || v < 0)
        return bad(std::string("field \"") + name + "\" must be a finite number >= 0, got " +
                   text(v));
  }
  return Status::Ok();
}

std::string ModelConfig::ToJson() const {
  json j;
  j["architectures"] = {model_type == "deepseek_v2"    ? "DeepseekV2ForCausalLM"
                        : model_type == "deepseek_v32" ? "DeepseekV32ForCausalLM"
                                                       : "DeepseekV3ForCausalLM"};
  j["model_type"] = model_type;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["moe_intermediate_size"] = moe_intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_nextn_predict_layers"] = num_nextn_predict_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_attention_heads;
  j["q_lora_rank"] = q_lora_rank > 0 ? json(q_lora_rank) : json(nullptr);
  j["kv_lora_rank"] = kv_lora_rank;
  j["qk_nope_head_dim"] = qk_nope_head_dim;
  j["qk_rope_head_dim"] = qk_rope_head_dim;
  j["v_head_dim"] = v_head_dim;
  j["n_routed_experts"] = n_routed_experts;
  j["n_shared_experts"] = n_shared_experts;
  j["num_experts_per_tok"] = num_experts_per_tok;
  j["n_group"] = n_group;
  j["topk_group"] = topk_group;
  j["topk_method"] = topk_method == kernels::TopkMethod::kNoauxTc  ? "noaux_tc"
                     : topk_method == kernels::TopkMethod::kGreedy ? "greedy"
                                                                   : "group_limited_greedy";
  j["scoring_func"] = scoring_func == kernels::ScoringFunc::kSigmoid ? "sigmoid" : "softmax";
  j["norm_topk_prob"] = norm_topk_prob;
  j["routed_scaling_factor"] = routed_scaling_factor;
  j["first_k_dense_replace"] = first_k_dense_replace;
  j["moe_layer_freq"] = moe_layer_freq;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  if (rope_scaling.enabled) {
    j["rope_scaling"] = {
        {"type", "yarn"},
        {"factor", rope_scaling.factor},
        {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings},
        {"beta_fast", rope_scaling.beta_fast},
        {"beta_slow", rope_scaling.beta_slow},
        {"mscale", rope_scaling.mscale},
        {"mscale_all_dim", rope_scaling.mscale_all_dim}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  if (sparse.enabled()) {
    j["index_n_heads"] = sparse.index_n_heads;
    j["index_head_dim"] = sparse.index_head_dim;
    j["index_topk"] = sparse.index_topk;
  }
  j["tie_word_embeddings"] = false;
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (eos_token_ids.size() == 1) j["eos_token_id"] = eos_token_ids[0];
  if (eos_token_ids.size() > 1) j["eos_token_id"] = eos_token_ids;
  j["torch_dtype"] = "bfloat16";
  if (fp8) {
    j["quantization_config"] = {{"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"},
                                {"quant_method", "fp8"},
                                {"weight_block_size", {128, 128}}};
    if (ue8m0_scales) j["quantization_config"]["scale_fmt"] = "ue8m0";
  }
  return j.dump(2) + "\n";
}

}  // namespace epserve
