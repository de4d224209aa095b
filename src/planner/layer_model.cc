#include "planner/layer_model.h"

#include <algorithm>
#include <cmath>

namespace epserve::planner {
namespace {

// Kernels of one (half) batch, before they are merged into a LayerBreakdown.
struct Pass {
  std::vector<KernelTime> kernels;
  KernelCost dispatch;
  KernelCost combine;
  double touched_experts = 0;
  double tokens_per_expert = 0;
  double destinations_per_token = 0;
  double rows_max_over_mean = 1;

  double StageUs(int stage) const {
    double sum = 0;
    for (const KernelTime& k : kernels) {
      if (k.stage == stage) sum += k.cost.time_us;
    }
    return sum;
  }
  double ComputeUs() const {
    double sum = 0;
    for (const KernelTime& k : kernels) sum += k.cost.time_us;
    return sum;
  }
};

class PassBuilder {
 public:
  // `total_tokens`: tokens entering the MoE layer over all DP groups (0: every group as `load`).
  PassBuilder(const PlanContext& ctx, const Deployment& d, const PassLoad& load,
              double total_tokens = 0)
      : ctx_(ctx),
        m_(*ctx.model),
        d_(d),
        load_(load),
        tokens_(load.Tokens()),
        decode_tokens_(load.DecodeTokens()),
        heads_(static_cast<double>(m_.num_attention_heads) / d.tp),
        total_tokens_(total_tokens > 0 ? total_tokens : tokens_ / d.tp * d.ep) {}

  // Stages 1-2 up to PostNorm: the MLA block of every layer. Decode requests use the absorbed
  // form over the latent cache; prompt chunks expand the latents to per-head K/V (MHA form).
  void AddAttention() {
    const double h = m_.hidden_size;
    const double q_head = m_.qk_nope_head_dim + m_.qk_rope_head_dim;
    const double latent = m_.kv_lora_rank + m_.qk_rope_head_dim;
    Stream("input_norm", 1, tokens_ * h * 4);
    if (m_.q_lora_rank > 0) {
      // q_a and kv_a read the same input: one fused projection (SPEC §2).
      Linear("qkv_a_proj", 1, tokens_, h, m_.q_lora_rank + latent);
      Stream("qkv_a_norm", 1, tokens_ * (m_.q_lora_rank + m_.kv_lora_rank) * 4);
      Linear("q_b_proj", 1, tokens_, m_.q_lora_rank, heads_ * q_head);
    } else {
      Linear("q_proj", 1, tokens_, h, heads_ * q_head);
      Linear("kv_a_proj", 1, tokens_, h, latent);
      Stream("kv_a_norm", 1, tokens_ * m_.kv_lora_rank * 4);
    }
    const bool prefill = !load_.prefill.empty();
    if (prefill) {
      // Every context token of a chunk (cached prefix + the chunk) is expanded to K_nope and V.
      double context = 0;
      for (const PrefillSegment& seg : load_.prefill) context += seg.prefix + seg.tokens;
      Linear("kv_b_proj", 1, context, m_.kv_lora_rank,
             heads_ * (m_.qk_nope_head_dim + m_.v_head_dim));
    }
    Stream("rope_append_kv", 1, tokens_ * (heads_ * m_.qk_rope_head_dim + latent) * 4);
    Bmm("bmm_q_absorb", 1, m_.qk_nope_head_dim, m_.kv_lora_rank);
    AttentionShape shape{.requests = load_.decode_requests,
                         .query_len = static_cast<double>(load_.query_len),
                         .kv_len = load_.kv_len,
                         .heads = heads_,
                         .latent_dim = static_cast<double>(m_.kv_lora_rank),
                         .rope_dim = static_cast<double>(m_.qk_rope_head_dim),
                         .kv_element_bytes = load_.kv_element_bytes};
    Add("attention", KernelKind::kAttention, 2,
        AttentionCost(*ctx_.hw, ctx_.eff->attention, shape));
    if (prefill) {
      PrefillAttentionShape mha{
          .segments = load_.prefill,
          .heads = heads_,
          .qk_dim = static_cast<double>(m_.qk_nope_head_dim + m_.qk_rope_head_dim),
          .v_dim = static_cast<double>(m_.v_head_dim),
          .element_bytes = 2};
      Add("prefill_attention", KernelKind::kAttention, 2,
          PrefillAttentionCost(*ctx_.hw, ctx_.eff->prefill_attention, mha));
    }
    Bmm("bmm_v_absorb", 2, m_.kv_lora_rank, m_.v_head_dim);
    Linear("o_proj", 2, tokens_, heads_ * m_.v_head_dim, h);
    // Ring all-reduce of the attention output inside the DP group.
    TpCollective("tp_all_reduce", 2, 2.0 * (d_.tp - 1) / d_.tp * tokens_ * h * 2);
    Stream("post_norm", 2, tokens_ * h * 4);
  }

  // Stages 2-5 of a MoE layer.
  void AddMoe(int routing_layer) {
    const double h = m_.hidden_size;
    const double f = m_.moe_intermediate_size;
    const double rank_tokens = tokens_ / d_.tp;  // the group's TP ranks split its tokens
    Add("gate", KernelKind::kGemm, 2,
        MatmulCost(*ctx_.hw, ctx_.eff->gemm,
                   {.m = rank_tokens,
                    .k = h,
                    .n = static_cast<double>(m_.n_routed_experts),
                    .element_bytes = 2,
                    .precision = Precision::kBf16}));
    const double shared = f * m_.n_shared_experts;
    Linear("shared_gate_up", 3, rank_tokens, h, 2 * shared);
    Stream("shared_act", 3, rank_tokens * shared * 5);
    Linear("shared_down", 3, rank_tokens, shared, h);

    const LayerRouting routing = ctx_.routing->Evaluate(routing_layer, total_tokens_, rank_tokens);
    // The slowest rank sets the pace: all ranks step through dispatch/combine together.
    KernelCost up, down, act;
    double slowest = -1;
    for (const RankRouting& rank : routing.ranks) {
      const double m = rank.touched_experts > 0 ? rank.rows / rank.touched_experts : 0;
      KernelCost rank_up = Expert(rank.touched_experts, m, h, 2 * f);
      KernelCost rank_down = Expert(rank.touched_experts, m, f, h);
      KernelCost rank_act = StreamCost(*ctx_.hw, ctx_.eff->elementwise, rank.rows * f * 5);
      const double time = rank_up.time_us + rank_down.time_us + rank_act.time_us;
      if (time > slowest) {
        slowest = time;
        up = rank_up;
        down = rank_down;
        act = rank_act;
        pass_.touched_experts = rank.touched_experts;
        pass_.tokens_per_expert = m;
        pass_.rows_max_over_mean = routing.mean_rows > 0 ? rank.rows / routing.mean_rows : 1;
      }
    }
    Add("group_gemm_gate_up", KernelKind::kGroupGemm, 4, up);
    Add("expert_act", KernelKind::kElementwise, 4, act);
    Add("group_gemm_down", KernelKind::kGroupGemm, 4, down);
    pass_.destinations_per_token = routing.destinations_per_token;

    // Dispatch sends FP8 rows with one fp32 scale per 128 values; combine returns BF16 rows,
    // one per (token, rank) as the sender pre-sums its local experts (SPEC §4). epserve's rows
    // also carry top_k (id, weight) slots, and come back as one f32 row per (token, expert):
    // top_k / destinations_per_token of them per row sent.
    const bool ours = d_.exchange == ExchangeFormat::kEpserve;
    const double dispatch_row =
        h + std::ceil(h / 128) * 4 + (ours ? 8.0 * m_.num_experts_per_tok : 0);
    const double combine_row =
        ours ? h * 4.0 * m_.num_experts_per_tok / std::max(1.0, routing.destinations_per_token)
             : h * 2;
    pass_.dispatch = CommCost(*ctx_.hw, ctx_.eff->dispatch,
                              {.nvlink = routing.nvlink_rows * dispatch_row,
                               .infiniband = routing.infiniband_rows * dispatch_row});
    pass_.combine = CommCost(*ctx_.hw, ctx_.eff->combine,
                             {.nvlink = routing.nvlink_rows * combine_row,
                              .infiniband = routing.infiniband_rows * combine_row});
    Stream("combine_reduce", 5, rank_tokens * (routing.destinations_per_token + 1) * h * 2);
    TpCollective("tp_all_gather", 5, (d_.tp - 1.0) / d_.tp * tokens_ * h * 2);
  }

  // Stage 3 of a dense layer: the MLP, split over the TP ranks.
  void AddDenseMlp() {
    const double h = m_.hidden_size;
    const double width = static_cast<double>(m_.intermediate_size) / d_.tp;
    Linear("mlp_gate_up", 3, tokens_, h, 2 * width);
    Stream("mlp_act", 3, tokens_ * width * 5);
    Linear("mlp_down", 3, tokens_, width, h);
    TpCollective("tp_all_reduce_mlp", 3, 2.0 * (d_.tp - 1) / d_.tp * tokens_ * h * 2);
  }

  Pass Take() { return std::move(pass_); }

 private:
  void Add(const char* name, KernelKind kind, int stage, const KernelCost& cost) {
    if (cost.time_us <= 0) return;  // nothing launched (no tokens)
    pass_.kernels.push_back(
        {.name = name, .kind = kind, .stage = stage, .launches = 1, .cost = cost});
  }
  void Linear(const char* name, int stage, double m, double k, double n) {
    Add(name, KernelKind::kGemm, stage,
        MatmulCost(*ctx_.hw, ctx_.eff->gemm,
                   {.m = m,
                    .k = k,
                    .n = n,
                    .element_bytes = m_.LinearElementBytes(),
                    .precision = m_.LinearPrecision()}));
  }
  // Absorb BMMs: decode tokens only (prompt chunks use the expanded form).
  void Bmm(const char* name, int stage, double k, double n) {
    Add(name, KernelKind::kBmm, stage,
        MatmulCost(*ctx_.hw, ctx_.eff->bmm,
                   {.groups = heads_,
                    .m = decode_tokens_,
                    .k = k,
                    .n = n,
                    .element_bytes = m_.LinearElementBytes(),
                    .precision = m_.LinearPrecision()}));
  }
  KernelCost Expert(double groups, double m, double k, double n) const {
    return MatmulCost(*ctx_.hw, ctx_.eff->group_gemm,
                      {.groups = groups,
                       .m = m,
                       .k = k,
                       .n = n,
                       .element_bytes = m_.LinearElementBytes(),
                       .precision = m_.LinearPrecision()});
  }
  void Stream(const char* name, int stage, double bytes) {
    Add(name, KernelKind::kElementwise, stage, StreamCost(*ctx_.hw, ctx_.eff->elementwise, bytes));
  }
  void TpCollective(const char* name, int stage, double bytes) {
    if (d_.tp <= 1) return;
    Add(name, KernelKind::kTpCollective, stage,
        CommCost(*ctx_.hw, ctx_.eff->tp_collective, {.nvlink = bytes}));
  }

  const PlanContext& ctx_;
  const ModelSpec& m_;
  const Deployment& d_;
  const PassLoad& load_;
  double tokens_;
  double decode_tokens_;
  double heads_;
  double total_tokens_;
  Pass pass_;
};

// Tokens entering the MoE layer over all DP groups. Written as (tokens / TP) x ranks so that a
// uniform load gives exactly the expression the decode model always used.
double TotalTokens(const Deployment& d, const LayerLoad& load) {
  const int busy = load.busy_groups > 0 ? std::min(load.busy_groups, d.dp) : d.dp;
  return load.busy.Tokens() / d.tp * (busy * d.tp) +
         load.other.Tokens() / d.tp * ((d.dp - busy) * d.tp);
}

Pass BuildMoePass(const PlanContext& ctx, const Deployment& d, const LayerLoad& load,
                  int routing_layer) {
  PassBuilder builder(ctx, d, load.busy, TotalTokens(d, load));
  builder.AddAttention();
  builder.AddMoe(routing_layer);
  return builder.Take();
}

// One micro-batch of a load: the first (ceil) or second (floor) half of the decode requests, and
// of every prompt chunk's tokens (the second half comes after the first in the prompt).
PassLoad HalfOf(const PassLoad& load, int half) {
  PassLoad out = load;
  const double first_requests = std::ceil(load.decode_requests / 2.0);
  out.decode_requests = half == 0 ? first_requests : load.decode_requests - first_requests;
  out.prefill.clear();
  for (const PrefillSegment& seg : load.prefill) {
    const double first = std::ceil(seg.tokens / 2.0);
    const PrefillSegment part =
        half == 0 ? PrefillSegment{.tokens = first, .prefix = seg.prefix}
                  : PrefillSegment{.tokens = seg.tokens - first, .prefix = seg.prefix + first};
    if (part.tokens > 0) out.prefill.push_back(part);
  }
  return out;
}

LayerLoad HalfOf(const LayerLoad& load, int half) {
  return {.busy = HalfOf(load.busy, half),
          .other = HalfOf(load.other, half),
          .busy_groups = load.busy_groups};
}

// Adds `pass`'s kernels to `out`, merging with same-named kernels already there.
void MergeKernels(const Pass& pass, LayerBreakdown& out) {
  for (const KernelTime& k : pass.kernels) {
    auto it = std::find_if(out.kernels.begin(), out.kernels.end(),
                           [&](const KernelTime& e) { return e.name == k.name; });
    if (it == out.kernels.end()) {
      out.kernels.push_back(k);
      continue;
    }
    it->launches += k.launches;
    it->cost.flops += k.cost.flops;
    it->cost.bytes += k.cost.bytes;
    it->cost.time_us += k.cost.time_us;
    it->cost.compute_bound = it->cost.compute_bound || k.cost.compute_bound;
  }
  out.compute_us += pass.ComputeUs();
}

void SetRouting(const Pass& full, LayerBreakdown& out) {
  out.touched_experts = full.touched_experts;
  out.tokens_per_expert = full.tokens_per_expert;
  out.destinations_per_token = full.destinations_per_token;
  out.rank_rows_max_over_mean = full.rows_max_over_mean;
}

}  // namespace

const char* KernelKindName(KernelKind kind) {
  switch (kind) {
    case KernelKind::kGemm:
      return "gemm";
    case KernelKind::kGroupGemm:
      return "group_gemm";
    case KernelKind::kBmm:
      return "bmm";
    case KernelKind::kAttention:
      return "attention";
    case KernelKind::kElementwise:
      return "elementwise";
    case KernelKind::kTpCollective:
      return "tp_collective";
  }
  return "?";
}

double LayerBreakdown::KindUs(KernelKind kind) const {
  double sum = 0;
  for (const KernelTime& k : kernels) {
    if (k.kind == kind) sum += k.cost.time_us;
  }
  return sum;
}

double LayerBreakdown::KernelUs(std::string_view name) const {
  for (const KernelTime& k : kernels) {
    if (k.name == name) return k.cost.time_us;
  }
  return 0;
}

double PassLoad::PrefillTokens() const {
  double sum = 0;
  for (const PrefillSegment& seg : prefill) sum += seg.tokens;
  return sum;
}

PassLoad DecodeLoad(const Workload& w, double requests) {
  return {.decode_requests = requests,
          .query_len = w.query_len,
          .kv_len = static_cast<double>(w.kv_len),
          .kv_element_bytes = w.kv_element_bytes};
}

StatusOr<LayerBreakdown> ModelLoadedMoeLayer(const PlanContext& ctx, const Deployment& d,
                                             const LayerLoad& load, OverlapMode mode,
                                             int routing_layer) {
  if (ctx.routing == nullptr || ctx.routing->ep() != d.ep ||
      ctx.routing->redundant_experts() != d.redundant_experts) {
    return Status::InvalidArgument("routing model was not built for EP " + std::to_string(d.ep) +
                                   " with " + std::to_string(d.redundant_experts) +
                                   " redundant experts");
  }
  if (routing_layer < 0 || routing_layer >= ctx.routing->num_layers()) {
    return Status::InvalidArgument("routing layer " + std::to_string(routing_layer) +
                                   " out of range");
  }
  LayerBreakdown out;
  out.moe = true;
  out.mode = mode;
  if (mode != OverlapMode::kMicroBatch) {
    Pass pass = BuildMoePass(ctx, d, load, routing_layer);
    MergeKernels(pass, out);
    SetRouting(pass, out);
    out.dispatch.transfer_us = pass.dispatch.time_us;
    out.dispatch.bytes = pass.dispatch.bytes;
    out.combine.transfer_us = pass.combine.time_us;
    out.combine.bytes = pass.combine.bytes;
    // Dispatch overlap: the shared expert (stage 3) runs between dispatch send and receive.
    const double hidden = mode == OverlapMode::kDispatchOverlap ? pass.StageUs(3) : 0;
    out.dispatch.visible_us = std::max(0.0, pass.dispatch.time_us - hidden);
    out.combine.visible_us = pass.combine.time_us;
  } else {
    if (load.busy.prefill.empty() && load.busy.decode_requests < 2) {
      return Status::InvalidArgument("micro-batching needs at least 2 requests per DP group");
    }
    if (load.busy.Tokens() < 2) {
      return Status::InvalidArgument("micro-batching needs at least 2 tokens per DP group");
    }
    Pass a = BuildMoePass(ctx, d, HalfOf(load, 0), routing_layer);
    Pass b = BuildMoePass(ctx, d, HalfOf(load, 1), routing_layer);
    MergeKernels(a, out);
    MergeKernels(b, out);
    SetRouting(BuildMoePass(ctx, d, load, routing_layer), out);
    // Slots alternate A1 B4 A2 B5 A3 B1 A4 B2 A5 B3: a half's dispatch overlaps its own shared
    // expert and the other half's stage 1; its combine overlaps the other half's stage 2.
    const double dispatch_a = std::max(0.0, a.dispatch.time_us - a.StageUs(3) - b.StageUs(1));
    const double dispatch_b = std::max(0.0, b.dispatch.time_us - b.StageUs(3) - a.StageUs(1));
    const double combine_a = std::max(0.0, a.combine.time_us - b.StageUs(2));
    const double combine_b = std::max(0.0, b.combine.time_us - a.StageUs(2));
    out.dispatch = {.transfer_us = a.dispatch.time_us + b.dispatch.time_us,
                    .visible_us = dispatch_a + dispatch_b,
                    .bytes = a.dispatch.bytes + b.dispatch.bytes};
    out.combine = {.transfer_us = a.combine.time_us + b.combine.time_us,
                   .visible_us = combine_a + combine_b,
                   .bytes = a.combine.bytes + b.combine.bytes};
  }
  out.total_us = out.compute_us + out.dispatch.visible_us + out.combine.visible_us;
  return out;
}

StatusOr<LayerBreakdown> ModelMoeLayer(const PlanContext& ctx, const Deployment& d,
                                       const Workload& w, OverlapMode mode, int routing_layer) {
  return ModelLoadedMoeLayer(ctx, d, {.busy = DecodeLoad(w, w.batch)}, mode, routing_layer);
}

LayerBreakdown ModelLoadedDenseLayer(const PlanContext& ctx, const Deployment& d,
                                     const LayerLoad& load) {
  PassBuilder builder(ctx, d, load.busy);
  builder.AddAttention();
  builder.AddDenseMlp();
  Pass pass = builder.Take();
  LayerBreakdown out;
  out.moe = false;
  out.mode = OverlapMode::kNone;
  MergeKernels(pass, out);
  out.total_us = out.compute_us;
  return out;
}

LayerBreakdown ModelDenseLayer(const PlanContext& ctx, const Deployment& d, const Workload& w) {
  return ModelLoadedDenseLayer(ctx, d, {.busy = DecodeLoad(w, w.batch)});
}

LayerBreakdown AverageBreakdowns(const std::vector<LayerBreakdown>& layers) {
  CHECK(!layers.empty()) << "no layers to average";
  LayerBreakdown out;
  out.moe = layers[0].moe;
  out.mode = layers[0].mode;
  out.rank_rows_max_over_mean = 0;  // summed below, then averaged
  for (const LayerBreakdown& l : layers) {
    Pass pass;
    pass.kernels = l.kernels;
    MergeKernels(pass, out);  // sums by kernel name (a layer may lack a zero-time kernel)
    out.dispatch.transfer_us += l.dispatch.transfer_us;
    out.dispatch.visible_us += l.dispatch.visible_us;
    out.dispatch.bytes += l.dispatch.bytes;
    out.combine.transfer_us += l.combine.transfer_us;
    out.combine.visible_us += l.combine.visible_us;
    out.combine.bytes += l.combine.bytes;
    out.total_us += l.total_us;
    out.touched_experts += l.touched_experts;
    out.tokens_per_expert += l.tokens_per_expert;
    out.destinations_per_token += l.destinations_per_token;
    out.rank_rows_max_over_mean += l.rank_rows_max_over_mean;
  }
  const double n = static_cast<double>(layers.size());
  for (KernelTime& k : out.kernels) {
    k.cost.time_us /= n;
    k.cost.flops /= n;
    k.cost.bytes /= n;
    k.launches = std::max(1, static_cast<int>(std::lround(k.launches / n)));
  }
  for (double* v :
       {&out.compute_us, &out.total_us, &out.dispatch.transfer_us, &out.dispatch.visible_us,
        &out.dispatch.bytes, &out.combine.transfer_us, &out.combine.visible_us, &out.combine.bytes,
        &out.touched_experts, &out.tokens_per_expert, &out.destinations_per_token,
        &out.rank_rows_max_over_mean}) {
    *v /= n;
  }
  return out;
}

}  // namespace epserve::planner
