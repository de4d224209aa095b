// The co-located side of disagg.h: decode and chunked prefill on the same ranks.
//
// Every DP group decodes its batch; a group with a prompt also computes one chunk of it in the
// same step (chunked prefill). All ranks step together through each MoE layer's dispatch and
// combine, so a step in which any group carries a chunk runs at that group's pace: the chunk's
// projections, expanded attention and its share of the expert rows delay every group's decode
// tokens, not just its own. The model:
//   - S: one prompt's service, the sum of its ceil(L / C) mixed steps (chunk j after j*C tokens);
//   - rho = (rate per group) x S, the share of a group's time with a prompt (M/D/1 per group);
//   - a step carries a chunk somewhere with probability P = 1 - (1 - rho)^DP, in about
//     1 + rho (DP - 1) groups at once (their rows all reach the GroupGEMM);
//   - TPOT = ((1 - P) decode step + P mean mixed step) / tokens per step;
//   - TTFT = rho S / (2 (1 - rho)) + S;
//   - the decode batch per group follows from Little's law at that TPOT.
// Batch, busy groups and rho are solved together by iteration from batch 1.
#include <algorithm>
#include <cmath>
#include <limits>

#include "planner/disagg.h"

namespace epserve::planner {
namespace {

StatusOr<LayerBreakdown> BestMixedMoe(const PlanContext& ctx, const Deployment& d,
                                      const LayerLoad& load, std::optional<OverlapMode> overlap) {
  std::vector<OverlapMode> modes;
  if (overlap.has_value()) {
    modes.push_back(*overlap);
  } else {
    modes = {OverlapMode::kNone, OverlapMode::kDispatchOverlap};
    if (load.busy.decode_requests >= 2) modes.push_back(OverlapMode::kMicroBatch);
  }
  std::optional<LayerBreakdown> best;
  for (OverlapMode mode : modes) {
    std::vector<LayerBreakdown> layers;
    for (int l = 0; l < ctx.routing->num_layers(); ++l) {
      ASSIGN_OR_RETURN(LayerBreakdown layer, ModelLoadedMoeLayer(ctx, d, load, mode, l));
      layers.push_back(std::move(layer));
    }
    LayerBreakdown avg = AverageBreakdowns(layers);
    if (!best || avg.total_us < best->total_us) best = std::move(avg);
  }
  return *std::move(best);
}

// A decode step in which `busy` groups also compute `segment`: the decode step with its layers
// replaced by the mixed ones (and one MTP layer over the chunk when decode drafts with MTP).
StatusOr<double> MixedStepUs(const PlanContext& ctx, const Deployment& d, const Workload& w,
                             const StepEstimate& decode, const PrefillSegment& segment, int busy,
                             std::optional<OverlapMode> overlap) {
  const ModelSpec& m = *ctx.model;
  PassLoad with_chunk = DecodeLoad(w, w.batch);
  with_chunk.prefill.push_back(segment);
  const LayerLoad load{.busy = with_chunk, .other = DecodeLoad(w, w.batch), .busy_groups = busy};
  ASSIGN_OR_RETURN(LayerBreakdown moe, BestMixedMoe(ctx, d, load, overlap));
  const LayerBreakdown dense = ModelLoadedDenseLayer(ctx, d, load);
  double step = decode.step_us + m.NumMoeLayers() * (moe.total_us - decode.moe_layer.total_us) +
                m.NumDenseLayers() * (dense.total_us - decode.dense_layer.total_us);
  if (w.DraftTokens() > 0 && m.num_nextn_predict_layers > 0) {
    const double h = m.hidden_size;
    const double eh_proj = MatmulCost(*ctx.hw, ctx.eff->gemm,
                                      {.m = segment.tokens,
                                       .k = 2 * h,
                                       .n = h,
                                       .element_bytes = m.LinearElementBytes(),
                                       .precision = m.LinearPrecision()})
                               .time_us;
    step += m.num_nextn_predict_layers * (moe.total_us - decode.moe_layer.total_us) + eh_proj;
  }
  return step;
}

}  // namespace

StatusOr<ColocatedPool> EvaluateColocated(const DisaggProblem& p, const PoolCandidate& c) {
  RETURN_IF_ERROR(p.target.Validate());
  if (c.replicas <= 0) return Status::InvalidArgument("replicas must be positive");
  if (c.chunk_tokens < 0) return Status::InvalidArgument("chunk must be >= 0");
  const Deployment& d = c.deployment;
  const PlanContext ctx{.hw = c.hw, .model = p.model, .eff = p.decode_eff, .routing = c.routing};
  const ServingTarget& t = p.target;
  ColocatedPool pool;
  pool.gpu = c.hw->name;
  pool.deployment = d;
  pool.replicas = c.replicas;
  pool.chunk_tokens = c.chunk_tokens > 0 ? c.chunk_tokens : t.prompt_len;
  std::vector<PrefillSegment> chunks;
  for (int done = 0; done < t.prompt_len; done += pool.chunk_tokens) {
    chunks.push_back(
        {.tokens = static_cast<double>(std::min(pool.chunk_tokens, t.prompt_len - done)),
         .prefix = static_cast<double>(done)});
  }
  Workload w{.batch = 1,
             .kv_len = t.prompt_len + t.output_len / 2,
             .query_len = p.decode.query_len,
             .acceptance_rate = p.decode.acceptance_rate,
             .kv_element_bytes = p.decode.kv_element_bytes};
  // Decoding requests at their largest context, plus the prompt being prefilled.
  Workload peak = w;
  peak.kv_len = t.prompt_len + t.output_len;
  const MemoryFit fit = EstimateMemory(ctx, d, peak);
  if (!fit.weights_fit || fit.max_batch < 2) return pool;
  const double rate_per_group = t.rate / c.replicas / d.dp;
  int batch = 1;
  int busy = d.dp;
  for (int iteration = 0; iteration < 200; ++iteration) {
    w.batch = batch;
    ASSIGN_OR_RETURN(
        StepEstimate decode,
        EstimateStep(ctx, d, w, {.overlap = p.decode.overlap, .require_memory_fit = false}));
    double service = 0;
    for (const PrefillSegment& segment : chunks) {
      ASSIGN_OR_RETURN(double step,
                       MixedStepUs(ctx, d, w, decode, segment, busy, p.decode.overlap));
      service += step;
    }
    pool.batch = batch;
    pool.busy_groups = busy;
    pool.decode_step_us = decode.step_us;
    pool.mixed_step_us = service / chunks.size();
    pool.utilization = rate_per_group * service * 1e-6;
    pool.stable = pool.utilization < 1;
    if (!pool.stable) break;
    pool.mixed_fraction = 1 - std::pow(1 - pool.utilization, d.dp);
    const double step =
        (1 - pool.mixed_fraction) * pool.decode_step_us + pool.mixed_fraction * pool.mixed_step_us;
    pool.tpot_us = step / decode.tokens_per_step;
    pool.ttft_us = pool.utilization * service / (2 * (1 - pool.utilization)) + service;
    const double in_flight = rate_per_group * t.output_len * pool.tpot_us * 1e-6;
    const int need = std::max(1, static_cast<int>(std::ceil(in_flight - 1e-9)));
    const int company =
        std::clamp(static_cast<int>(std::ceil(1 + pool.utilization * (d.dp - 1) - 1e-9)), 1, d.dp);
    if (need <= batch && company == busy) break;
    if (need + 1 > fit.max_batch) {  // + the prompt being prefilled
      batch = need;
      break;
    }
    batch = std::max(batch, need);
    busy = company;
  }
  pool.fits = pool.stable && batch + 1 <= fit.max_batch && batch == pool.batch;
  pool.meets =
      pool.fits && pool.ttft_us <= t.ttft_slo_ms * 1e3 && pool.tpot_us <= t.tpot_slo_ms * 1e3;
  return pool;
}

}  // namespace epserve::planner
