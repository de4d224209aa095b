#include "planner/step_model.h"

#include <cmath>
#include <cstdio>
#include <limits>

namespace epserve::planner {
namespace {

std::string Gb(double bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GB", bytes / 1e9);
  return text;
}

// Weights of one MLA block on one rank: latent projections replicated, head parts split by TP.
double AttentionBytes(const ModelSpec& m, int tp) {
  const double h = m.hidden_size;
  const double heads = static_cast<double>(m.num_attention_heads) / tp;
  const double q_head = m.qk_nope_head_dim + m.qk_rope_head_dim;
  double bytes = m.LinearWeightBytes(m.kv_lora_rank + m.qk_rope_head_dim, h);
  if (m.q_lora_rank > 0) {
    bytes +=
        m.LinearWeightBytes(m.q_lora_rank, h) + m.LinearWeightBytes(heads * q_head, m.q_lora_rank);
  } else {
    bytes += m.LinearWeightBytes(heads * q_head, h);
  }
  bytes += m.LinearWeightBytes(heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank);
  bytes += m.LinearWeightBytes(h, heads * m.v_head_dim);
  bytes += 2.0 * (2 * h + m.q_lora_rank + m.kv_lora_rank);  // BF16 norms
  return bytes;
}

// One MoE layer's experts on one rank: its routed slots (redundant copies included), every
// shared expert, the BF16 gate.
double MoeBytes(const ModelSpec& m, const Deployment& d) {
  const double expert = 3 * m.LinearWeightBytes(m.moe_intermediate_size, m.hidden_size);
  const double experts =
      static_cast<double>(m.n_routed_experts + d.redundant_experts) / d.ep + m.n_shared_experts;
  return experts * expert + m.n_routed_experts * (2.0 * m.hidden_size + 4.0);
}

bool UsesMtp(const ModelSpec& m, const Workload& w) {
  return w.DraftTokens() > 0 && m.num_nextn_predict_layers > 0;
}

StatusOr<StepEstimate> EstimateWithMode(const PlanContext& ctx, const Deployment& d,
                                        const Workload& w, OverlapMode mode) {
  const ModelSpec& m = *ctx.model;
  StepEstimate est;
  est.mode = mode;
  std::vector<LayerBreakdown> layers;
  for (int l = 0; l < ctx.routing->num_layers(); ++l) {
    ASSIGN_OR_RETURN(LayerBreakdown layer, ModelMoeLayer(ctx, d, w, mode, l));
    layers.push_back(std::move(layer));
  }
  est.moe_layer = AverageBreakdowns(layers);
  est.dense_layer = ModelDenseLayer(ctx, d, w);
  est.moe_layers_us = m.NumMoeLayers() * est.moe_layer.total_us;
  est.dense_layers_us = m.NumDenseLayers() * est.dense_layer.total_us;

  const double tokens = static_cast<double>(w.batch) * w.query_len;
  const double h = m.hidden_size;
  est.lm_head_us = MatmulCost(*ctx.hw, ctx.eff->gemm,
                              {.m = tokens,
                               .k = h,
                               .n = static_cast<double>(m.vocab_size) / d.tp,
                               .element_bytes = 2,
                               .precision = Precision::kBf16})
                       .time_us;
  if (UsesMtp(m, w)) {
    // Each draft token: eh_proj on [embedding, hidden], the MTP layer (a MoE layer), LM head.
    const double eh_proj = MatmulCost(*ctx.hw, ctx.eff->gemm,
                                      {.m = tokens,
                                       .k = 2 * h,
                                       .n = h,
                                       .element_bytes = m.LinearElementBytes(),
                                       .precision = m.LinearPrecision()})
                               .time_us +
                           StreamCost(*ctx.hw, ctx.eff->elementwise, tokens * h * 8).time_us;
    est.mtp_us = w.DraftTokens() * (est.moe_layer.total_us + eh_proj + est.lm_head_us);
  } else if (w.DraftTokens() > 0) {
    est.notes.push_back(m.name + " has no MTP layers: the draft model's cost is not included");
  }
  est.overhead_us = ctx.eff->step_overhead_us;
  est.step_us =
      est.moe_layers_us + est.dense_layers_us + est.mtp_us + est.lm_head_us + est.overhead_us;
  est.tokens_per_step = w.TokensPerStep();
  est.speed = w.batch > 0 ? est.tokens_per_step / (est.step_us * 1e-6) : 0;
  const double requests = static_cast<double>(w.batch) * d.dp;
  est.throughput_per_machine = est.speed * requests / d.num_machines;
  est.throughput_per_gpu = est.speed * requests / d.ep;
  return est;
}

}  // namespace

MemoryFit EstimateMemory(const PlanContext& ctx, const Deployment& d, const Workload& w) {
  const ModelSpec& m = *ctx.model;
  const double h = m.hidden_size;
  MemoryFit fit;
  double bytes = m.num_hidden_layers * AttentionBytes(m, d.tp);
  bytes += m.NumDenseLayers() * 3 *
           m.LinearWeightBytes(static_cast<double>(m.intermediate_size) / d.tp, h);
  bytes += m.NumMoeLayers() * MoeBytes(m, d);
  bytes += 2.0 * (2.0 * m.vocab_size * h) / d.tp;  // BF16 embedding + LM head, vocab split by TP
  bytes += m.num_nextn_predict_layers *
           (AttentionBytes(m, d.tp) + MoeBytes(m, d) + m.LinearWeightBytes(h, 2 * h));
  fit.weight_bytes = bytes;
  // KvBytesPerToken counts BF16 elements; other cache types scale it.
  const double per_token =
      static_cast<double>(UsesMtp(m, w) ? m.KvBytesPerTokenWithMtp() : m.KvBytesPerToken());
  fit.kv_bytes_per_request = per_token * w.kv_len * (w.kv_element_bytes / 2.0);
  fit.reserve_bytes = ctx.eff->memory_reserve_gb * 1e9;
  fit.capacity_bytes = ctx.hw->MemoryBytes();
  fit.free_for_kv_bytes = fit.capacity_bytes - fit.weight_bytes - fit.reserve_bytes;
  fit.weights_fit = fit.free_for_kv_bytes > 0;
  if (!fit.weights_fit) {
    fit.max_batch = 0;
  } else if (fit.kv_bytes_per_request <= 0) {
    fit.max_batch = std::numeric_limits<int>::max();
  } else {
    fit.max_batch = static_cast<int>(
        std::min(2e9, std::floor(fit.free_for_kv_bytes / fit.kv_bytes_per_request)));
  }
  fit.batch_fits = fit.weights_fit && w.batch <= fit.max_batch;
  return fit;
}

Status CheckMemory(const MemoryFit& fit, const PlanContext& ctx, const Deployment& d,
                   const Workload& w) {
  if (!fit.weights_fit) {
    return Status::InvalidArgument(
        d.ToString() + ": " + ctx.model->name + " needs " + Gb(fit.weight_bytes) +
        " of weights per GPU plus a " + Gb(fit.reserve_bytes) + " reserve, but " + ctx.hw->name +
        " has " + Gb(fit.capacity_bytes) + " (use a larger EP or TP, or a GPU with more memory)");
  }
  if (!fit.batch_fits) {
    return Status::InvalidArgument(
        d.ToString() + " of " + ctx.hw->name + ": " + std::to_string(w.batch) + " requests of " +
        std::to_string(w.kv_len) + " tokens need " + Gb(w.batch * fit.kv_bytes_per_request) +
        " of KV cache per GPU but only " + Gb(fit.free_for_kv_bytes) +
        " is free after weights: at most " + std::to_string(fit.max_batch) +
        " requests per DP group");
  }
  return Status::Ok();
}

StatusOr<StepEstimate> EstimateStep(const PlanContext& ctx, const Deployment& d, const Workload& w,
                                    const StepOptions& options) {
  RETURN_IF_ERROR(w.Validate());
  RETURN_IF_ERROR(d.Validate(*ctx.model));
  if (d.gpus_per_machine > ctx.hw->gpus_per_machine) {
    return Status::InvalidArgument(d.ToString() + ": " + ctx.hw->name + " machines have " +
                                   std::to_string(ctx.hw->gpus_per_machine) + " GPUs, not " +
                                   std::to_string(d.gpus_per_machine));
  }
  MemoryFit fit = EstimateMemory(ctx, d, w);
  if (options.require_memory_fit) RETURN_IF_ERROR(CheckMemory(fit, ctx, d, w));
  std::optional<StepEstimate> best;
  std::vector<OverlapMode> modes;
  if (options.overlap.has_value()) {
    modes.push_back(*options.overlap);
  } else {
    modes = {OverlapMode::kNone, OverlapMode::kDispatchOverlap};
    if (w.batch >= 2) modes.push_back(OverlapMode::kMicroBatch);
  }
  for (OverlapMode mode : modes) {
    ASSIGN_OR_RETURN(StepEstimate est, EstimateWithMode(ctx, d, w, mode));
    if (!best.has_value() || est.step_us < best->step_us) best = std::move(est);
  }
  best->memory = fit;
  return *std::move(best);
}

}  // namespace epserve::planner
