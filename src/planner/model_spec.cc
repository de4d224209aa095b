#include "planner/model_spec.h"

#include <cmath>

#include "planner/json_util.h"

namespace epserve::planner {
namespace {

Status RequirePositive(int value, const char* field) {
  if (value <= 0) {
    return Status::InvalidArgument(std::string("config.json: '") + field + "' must be > 0");
  }
  return Status::Ok();
}

// Per-layer MLA projection parameters, all heads.
double AttentionParamsPerLayer(const ModelSpec& m) {
  const double h = m.hidden_size;
  const double heads = m.num_attention_heads;
  const double q_head = m.qk_nope_head_dim + m.qk_rope_head_dim;
  double q =
      m.q_lora_rank > 0 ? h * m.q_lora_rank + m.q_lora_rank * heads * q_head : h * heads * q_head;
  double kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim);
  double kv_b = m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim);
  double o = heads * m.v_head_dim * h;
  return q + kv_a + kv_b + o;
}

double ExpertParams(const ModelSpec& m) { return 3.0 * m.hidden_size * m.moe_intermediate_size; }

}  // namespace

Status ModelSpec::Validate() const {
  RETURN_IF_ERROR(RequirePositive(hidden_size, "hidden_size"));
  RETURN_IF_ERROR(RequirePositive(num_hidden_layers, "num_hidden_layers"));
  RETURN_IF_ERROR(RequirePositive(n_routed_experts, "n_routed_experts"));
  RETURN_IF_ERROR(RequirePositive(num_experts_per_tok, "num_experts_per_tok"));
  RETURN_IF_ERROR(RequirePositive(moe_intermediate_size, "moe_intermediate_size"));
  RETURN_IF_ERROR(RequirePositive(num_attention_heads, "num_attention_heads"));
  RETURN_IF_ERROR(RequirePositive(kv_lora_rank, "kv_lora_rank"));
  RETURN_IF_ERROR(RequirePositive(qk_nope_head_dim, "qk_nope_head_dim"));
  RETURN_IF_ERROR(RequirePositive(qk_rope_head_dim, "qk_rope_head_dim"));
  RETURN_IF_ERROR(RequirePositive(v_head_dim, "v_head_dim"));
  RETURN_IF_ERROR(RequirePositive(vocab_size, "vocab_size"));
  RETURN_IF_ERROR(RequirePositive(n_group, "n_group"));
  RETURN_IF_ERROR(RequirePositive(topk_group, "topk_group"));
  RETURN_IF_ERROR(RequirePositive(weight_block_size, "weight_block_size"));
  if (first_k_dense_replace < 0 || first_k_dense_replace >= num_hidden_layers) {
    return Status::InvalidArgument("config.json: 'first_k_dense_replace' must be in [0, layers)");
  }
  if (first_k_dense_replace > 0 && intermediate_size <= 0) {
    return Status::InvalidArgument("config.json: dense layers need 'intermediate_size' > 0");
  }
  if (n_shared_experts < 0 || q_lora_rank < 0 || num_nextn_predict_layers < 0) {
    return Status::InvalidArgument(
        "config.json: n_shared_experts, q_lora_rank, num_nextn_predict_layers must be >= 0");
  }
  if (num_experts_per_tok > n_routed_experts) {
    return Status::InvalidArgument("config.json: num_experts_per_tok > n_routed_experts");
  }
  if (n_routed_experts % n_group != 0 || topk_group > n_group) {
    return Status::InvalidArgument(
        "config.json: n_routed_experts must split into n_group groups and topk_group <= n_group");
  }
  if (num_experts_per_tok > topk_group * (n_routed_experts / n_group)) {
    return Status::InvalidArgument(
        "config.json: the kept groups hold fewer experts than num_experts_per_tok");
  }
  return Status::Ok();
}

int64_t ModelSpec::KvBytesPerToken() const {
  return static_cast<int64_t>(num_hidden_layers) * (kv_lora_rank + qk_rope_head_dim) * 2;
}

int64_t ModelSpec::KvBytesPerTokenWithMtp() const {
  return static_cast<int64_t>(num_hidden_layers + num_nextn_predict_layers) *
         (kv_lora_rank + qk_rope_head_dim) * 2;
}

double ModelSpec::LinearWeightBytes(double rows, double cols) const {
  if (weight_format == WeightFormat::kBf16) return 2.0 * rows * cols;
  const double b = weight_block_size;
  return rows * cols + std::ceil(rows / b) * std::ceil(cols / b) * 4.0;
}

StatusOr<ModelSpec> ModelSpecFromConfig(const nlohmann::json& config, const std::string& name) {
  if (!config.is_object()) return Status::InvalidArgument(name + ": config.json is not an object");
  ModelSpec m;
  m.name = name;
  const std::string ctx = name + " config.json";
  ASSIGN_OR_RETURN(m.hidden_size, GetInt(config, "hidden_size", ctx));
  ASSIGN_OR_RETURN(m.num_hidden_layers, GetInt(config, "num_hidden_layers", ctx));
  ASSIGN_OR_RETURN(m.first_k_dense_replace, GetIntOr(config, "first_k_dense_replace", 0, ctx));
  ASSIGN_OR_RETURN(m.intermediate_size, GetIntOr(config, "intermediate_size", 0, ctx));
  ASSIGN_OR_RETURN(m.n_routed_experts, GetInt(config, "n_routed_experts", ctx));
  ASSIGN_OR_RETURN(m.n_shared_experts, GetIntOr(config, "n_shared_experts", 0, ctx));
  ASSIGN_OR_RETURN(m.num_experts_per_tok, GetInt(config, "num_experts_per_tok", ctx));
  ASSIGN_OR_RETURN(m.moe_intermediate_size, GetInt(config, "moe_intermediate_size", ctx));
  ASSIGN_OR_RETURN(m.n_group, GetIntOr(config, "n_group", 1, ctx));
  ASSIGN_OR_RETURN(m.topk_group, GetIntOr(config, "topk_group", 1, ctx));
  ASSIGN_OR_RETURN(m.num_attention_heads, GetInt(config, "num_attention_heads", ctx));
  ASSIGN_OR_RETURN(m.q_lora_rank, GetIntOr(config, "q_lora_rank", 0, ctx));
  ASSIGN_OR_RETURN(m.kv_lora_rank, GetInt(config, "kv_lora_rank", ctx));
  ASSIGN_OR_RETURN(m.qk_nope_head_dim, GetInt(config, "qk_nope_head_dim", ctx));
  ASSIGN_OR_RETURN(m.qk_rope_head_dim, GetInt(config, "qk_rope_head_dim", ctx));
  ASSIGN_OR_RETURN(m.v_head_dim, GetInt(config, "v_head_dim", ctx));
  ASSIGN_OR_RETURN(m.vocab_size, GetInt(config, "vocab_size", ctx));
  ASSIGN_OR_RETURN(m.num_nextn_predict_layers,
                   GetIntOr(config, "num_nextn_predict_layers", 0, ctx));
  int moe_layer_freq = 1;
  ASSIGN_OR_RETURN(moe_layer_freq, GetIntOr(config, "moe_layer_freq", 1, ctx));
  if (moe_layer_freq != 1) {
    return Status::InvalidArgument(ctx + ": moe_layer_freq != 1 is not supported by the planner");
  }
  if (config.contains("quantization_config") && config["quantization_config"].is_object()) {
    const nlohmann::json& quant = config["quantization_config"];
    const std::string method = GetStringOr(quant, "quant_method", "");
    if (method != "fp8") {
      return Status::InvalidArgument(ctx + ": quant_method '" + method +
                                     "' is not supported (fp8 block quantization only)");
    }
    m.weight_format = WeightFormat::kFp8Block;
    if (quant.contains("weight_block_size") && quant["weight_block_size"].is_array() &&
        !quant["weight_block_size"].empty() && quant["weight_block_size"][0].is_number_integer()) {
      m.weight_block_size = quant["weight_block_size"][0].get<int>();
    }
  } else {
    const std::string dtype = GetStringOr(config, "torch_dtype", "bfloat16");
    if (dtype != "bfloat16" && dtype != "float16") {
      return Status::InvalidArgument(ctx + ": torch_dtype '" + dtype +
                                     "' is not supported (bfloat16, float16 or fp8 blocks)");
    }
    m.weight_format = WeightFormat::kBf16;
  }
  RETURN_IF_ERROR(m.Validate().WithContext(name));
  return m;
}

StatusOr<ModelSpec> LoadModelConfig(const std::string& path) {
  ASSIGN_OR_RETURN(nlohmann::json config, ReadJsonFile(path));
  // Name the model after its folder (…/deepseek-v3/config.json -> deepseek-v3).
  std::string name = "model";
  const size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    std::string dir = path.substr(0, slash);
    size_t dir_slash = dir.find_last_of('/');
    name = dir_slash == std::string::npos ? dir : dir.substr(dir_slash + 1);
  }
  return ModelSpecFromConfig(config, name);
}

ParamCounts CountParams(const ModelSpec& m) {
  ParamCounts counts;
  const double h = m.hidden_size;
  const double moe_layers = m.NumMoeLayers();
  counts.attention = m.num_hidden_layers * AttentionParamsPerLayer(m);
  counts.dense_mlp = m.NumDenseLayers() * 3.0 * h * m.intermediate_size;
  counts.routed_experts = moe_layers * m.n_routed_experts * ExpertParams(m);
  counts.shared_experts = moe_layers * m.n_shared_experts * ExpertParams(m);
  counts.gates = moe_layers * m.n_routed_experts * h;
  counts.embedding = 2.0 * m.vocab_size * h;
  const double mtp_layer = AttentionParamsPerLayer(m) +
                           (m.n_routed_experts + m.n_shared_experts) * ExpertParams(m) +
                           m.n_routed_experts * h + 2.0 * h * h;  // + eh_proj
  counts.mtp = m.num_nextn_predict_layers * mtp_layer;
  counts.active_per_token =
      counts.attention + counts.dense_mlp + counts.embedding +
      moe_layers * (m.num_experts_per_tok + m.n_shared_experts) * ExpertParams(m) + counts.gates;
  return counts;
}

}  // namespace epserve::planner
