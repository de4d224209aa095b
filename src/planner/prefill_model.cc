#include "planner/prefill_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace epserve::planner {
namespace {

std::string PrefillGb(double bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GB", bytes / 1e9);
  return text;
}

// Chunks of each pass (first come first served, filled up to `chunk` tokens; 0: one pass).
struct PlannedPass {
  std::vector<PrefillSegment> segments;
  int finished = 0;
};
std::vector<PlannedPass> SchedulePasses(const std::vector<int>& prompt_lens, int chunk) {
  std::vector<PlannedPass> passes;
  if (chunk <= 0) {
    PlannedPass pass;
    for (int len : prompt_lens) {
      pass.segments.push_back({.tokens = static_cast<double>(len), .prefix = 0});
    }
    pass.finished = static_cast<int>(prompt_lens.size());
    passes.push_back(std::move(pass));
    return passes;
  }
  size_t next = 0;
  int done = 0;  // tokens of prompt `next` already computed
  while (next < prompt_lens.size()) {
    PlannedPass pass;
    int budget = chunk;
    while (budget > 0 && next < prompt_lens.size()) {
      const int take = std::min(budget, prompt_lens[next] - done);
      pass.segments.push_back(
          {.tokens = static_cast<double>(take), .prefix = static_cast<double>(done)});
      budget -= take;
      done += take;
      if (done == prompt_lens[next]) {
        ++pass.finished;
        ++next;
        done = 0;
      }
    }
    passes.push_back(std::move(pass));
  }
  return passes;
}

StatusOr<LayerBreakdown> AveragedMoeLayer(const PlanContext& ctx, const Deployment& d,
                                          const LayerLoad& load, OverlapMode mode) {
  std::vector<LayerBreakdown> layers;
  for (int l = 0; l < ctx.routing->num_layers(); ++l) {
    ASSIGN_OR_RETURN(LayerBreakdown layer, ModelLoadedMoeLayer(ctx, d, load, mode, l));
    layers.push_back(std::move(layer));
  }
  return AverageBreakdowns(layers);
}

StatusOr<PrefillPass> PricePass(const PlanContext& ctx, const Deployment& d,
                                const PrefillOptions& o, const PlannedPass& planned) {
  const ModelSpec& m = *ctx.model;
  PassLoad busy{.kv_element_bytes = o.kv_element_bytes, .prefill = planned.segments};
  const LayerLoad load{.busy = busy, .busy_groups = o.busy_groups};
  std::vector<OverlapMode> modes;
  if (o.overlap.has_value()) {
    modes.push_back(*o.overlap);
  } else {
    modes = {OverlapMode::kNone, OverlapMode::kDispatchOverlap};
    if (busy.Tokens() >= 2) modes.push_back(OverlapMode::kMicroBatch);
  }
  PrefillPass pass;
  pass.segments = planned.segments;
  pass.finished_prompts = planned.finished;
  bool have = false;
  for (OverlapMode mode : modes) {
    ASSIGN_OR_RETURN(LayerBreakdown layer, AveragedMoeLayer(ctx, d, load, mode));
    if (!have || layer.total_us < pass.moe_layer.total_us) {
      pass.moe_layer = std::move(layer);
      pass.mode = mode;
      have = true;
    }
  }
  pass.dense_layer = ModelLoadedDenseLayer(ctx, d, load);
  pass.moe_layers_us = m.NumMoeLayers() * pass.moe_layer.total_us;
  pass.dense_layers_us = m.NumDenseLayers() * pass.dense_layer.total_us;
  const double h = m.hidden_size;
  // Only the last token of a finished prompt reaches the LM head (its first output token).
  pass.lm_head_us = MatmulCost(*ctx.hw, ctx.eff->gemm,
                               {.m = static_cast<double>(planned.finished),
                                .k = h,
                                .n = static_cast<double>(m.vocab_size) / d.tp,
                                .element_bytes = 2,
                                .precision = Precision::kBf16})
                        .time_us;
  if (o.mtp == MtpPrefill::kWithMtp && m.num_nextn_predict_layers > 0) {
    // Each MTP layer runs over every chunk token: eh_proj on [embedding, hidden], a MoE layer,
    // and the LM head for the finished prompts' draft token.
    const double tokens = busy.Tokens();
    const double eh_proj = MatmulCost(*ctx.hw, ctx.eff->gemm,
                                      {.m = tokens,
                                       .k = 2 * h,
                                       .n = h,
                                       .element_bytes = m.LinearElementBytes(),
                                       .precision = m.LinearPrecision()})
                               .time_us +
                           StreamCost(*ctx.hw, ctx.eff->elementwise, tokens * h * 8).time_us;
    pass.mtp_us =
        m.num_nextn_predict_layers * (pass.moe_layer.total_us + eh_proj + pass.lm_head_us);
  }
  pass.overhead_us = ctx.eff->step_overhead_us;
  pass.pass_us =
      pass.moe_layers_us + pass.dense_layers_us + pass.mtp_us + pass.lm_head_us + pass.overhead_us;
  return pass;
}

}  // namespace

StatusOr<PrefillEstimate> EstimatePrefill(const PlanContext& ctx, const Deployment& d,
                                          const PrefillOptions& o) {
  RETURN_IF_ERROR(d.Validate(*ctx.model));
  if (o.prompt_lens.empty()) return Status::InvalidArgument("--prompt-lens: no prompts");
  for (int len : o.prompt_lens) {
    if (len <= 0) {
      return Status::InvalidArgument("--prompt-lens: " + std::to_string(len) +
                                     " is not a positive token count");
    }
  }
  if (o.chunk_tokens < 0) {
    return Status::InvalidArgument("--chunk " + std::to_string(o.chunk_tokens) + " must be >= 0");
  }
  if (o.busy_groups < 0 || o.busy_groups > d.dp) {
    return Status::InvalidArgument("busy groups " + std::to_string(o.busy_groups) +
                                   " must be in [0, DP = " + std::to_string(d.dp) + "]");
  }
  if (!(o.kv_element_bytes > 0)) return Status::InvalidArgument("KV element bytes must be > 0");
  PrefillEstimate est;
  est.busy_groups = o.busy_groups > 0 ? o.busy_groups : d.dp;
  for (int len : o.prompt_lens) est.prompt_tokens += len;
  // The group holds the latent cache of all its prompts (MTP layers included when they run).
  const Workload kv{.batch = 1,
                    .kv_len = static_cast<int>(std::min(est.prompt_tokens, 2e9)),
                    .query_len = o.mtp == MtpPrefill::kWithMtp ? 2 : 1,
                    .kv_element_bytes = o.kv_element_bytes};
  est.memory = EstimateMemory(ctx, d, kv);
  if (o.require_memory_fit) {
    if (!est.memory.weights_fit) RETURN_IF_ERROR(CheckMemory(est.memory, ctx, d, kv));
    if (!est.memory.batch_fits) {
      return Status::InvalidArgument(
          d.ToString() + " of " + ctx.hw->name + ": " + std::to_string(o.prompt_lens.size()) +
          " prompt(s) of " + std::to_string(static_cast<int64_t>(est.prompt_tokens)) +
          " tokens in all need " + PrefillGb(est.memory.kv_bytes_per_request) +
          " of KV cache per GPU but only " + PrefillGb(est.memory.free_for_kv_bytes) +
          " is free after weights (use fewer or shorter prompts per DP group, or a larger EP)");
    }
  }
  size_t prompt = 0;
  for (const PlannedPass& planned : SchedulePasses(o.prompt_lens, o.chunk_tokens)) {
    ASSIGN_OR_RETURN(PrefillPass pass, PricePass(ctx, d, o, planned));
    est.total_us += pass.pass_us;
    for (int i = 0; i < pass.finished_prompts; ++i, ++prompt) {
      est.prompt_done_us.push_back(est.total_us);
    }
    est.passes.push_back(std::move(pass));
  }
  const double tokens = est.prompt_tokens * est.busy_groups;
  est.tokens_per_s_per_gpu = tokens / (est.total_us * 1e-6) / d.ep;
  est.tokens_per_s_per_machine = tokens / (est.total_us * 1e-6) / d.num_machines;
  return est;
}

StatusOr<TtftEstimate> EstimateTtft(const PlanContext& ctx, const Deployment& d,
                                    const TtftOptions& o) {
  if (!(o.rate >= 0)) return Status::InvalidArgument("--rate must be >= 0");
  if (o.prompt_len <= 0) return Status::InvalidArgument("--prompt-len must be positive");
  const double rate_per_group = o.rate / d.dp;
  TtftEstimate out;
  // From every group busy down: fewer busy groups shorten the service, which lowers rho, which
  // lowers the busy count; the sequence only falls, so it ends at a fixed point.
  int busy = d.dp;
  for (int iteration = 0; iteration < 64; ++iteration) {
    ASSIGN_OR_RETURN(PrefillEstimate est,
                     EstimatePrefill(ctx, d,
                                     {.prompt_lens = {o.prompt_len},
                                      .chunk_tokens = o.chunk_tokens,
                                      .busy_groups = busy,
                                      .overlap = o.overlap,
                                      .mtp = o.mtp,
                                      .kv_element_bytes = o.kv_element_bytes}));
    out.service_us = est.total_us;
    out.prefill = std::move(est);
    out.busy_groups = busy;
    out.utilization = rate_per_group * out.service_us * 1e-6;
    const double company = 1 + std::min(1.0, out.utilization) * (d.dp - 1);
    const int next = std::clamp(static_cast<int>(std::ceil(company - 1e-9)), 1, d.dp);
    if (next >= busy) break;
    busy = next;
  }
  out.stable = out.utilization < 1;
  if (!out.stable) {
    out.wait_us = out.ttft_us = std::numeric_limits<double>::infinity();
    return out;
  }
  out.wait_us = out.utilization * out.service_us / (2 * (1 - out.utilization));
  out.ttft_us = out.wait_us + out.service_us + o.extra_us;
  return out;
}

}  // namespace epserve::planner
