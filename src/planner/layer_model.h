// Time of one decoder layer on one rank, kernel by kernel, under an overlap mode (SPEC §5):
// the MLA attention block, the gate, the shared expert, the routed experts' GroupGEMM, and the
// dispatch/combine exchange, placed on the 5 stages of the write-up's micro-batch schedule:
//   1 InputNorm, QKV projection, append KV, BMM    2 BMM, attention, O projection, PostNorm, gate
//   3 dispatch send, shared expert                  4 dispatch recv, GroupGEMM, combine send
//   5 combine recv
// Compute kernels share one stream and never overlap each other; communication overlaps
// whatever compute the schedule places between its send and its receive.
// The same kernels price prefill (prefill_model.h): a pass may carry prompt chunks, whose
// attention runs in MLA's expanded MHA form (kv_b_proj expands the cached latents to per-head
// K/V, then causal attention), alongside or instead of decode requests (absorbed form).
// Thread safety: pure functions of their arguments.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "planner/deployment.h"
#include "planner/efficiency.h"
#include "planner/hardware.h"
#include "planner/model_spec.h"
#include "planner/roofline.h"
#include "planner/routing.h"

namespace epserve::planner {

// Everything the model reads; not owned. REQUIRES: all non-null and alive during the call.
struct PlanContext {
  const HardwareSpec* hw = nullptr;
  const ModelSpec* model = nullptr;
  const EfficiencyFactors* eff = nullptr;
  const RoutingModel* routing = nullptr;  // built for the deployment's EP
};

enum class KernelKind { kGemm, kGroupGemm, kBmm, kAttention, kElementwise, kTpCollective };
const char* KernelKindName(KernelKind kind);

struct KernelTime {
  std::string name;
  KernelKind kind = KernelKind::kGemm;
  int stage = 1;     // 1..5 as above
  int launches = 1;  // 2 under micro-batching (one per half)
  KernelCost cost;   // summed over launches
};

struct CommTime {
  double transfer_us = 0;  // whole transfer time, summed over micro-batches
  double visible_us = 0;   // the part no compute hides (adds to the layer time)
  double bytes = 0;        // per rank, summed over micro-batches
};

struct LayerBreakdown {
  bool moe = true;
  OverlapMode mode = OverlapMode::kNone;
  std::vector<KernelTime> kernels;  // compute stream, in execution order
  CommTime dispatch;
  CommTime combine;
  double compute_us = 0;  // sum of kernels
  double total_us = 0;    // compute + visible communication
  // Routing of the (busiest) rank, for one full batch.
  double touched_experts = 0;
  double tokens_per_expert = 0;  // m of the GroupGEMM
  double destinations_per_token = 0;
  // Expert rows of the rank that sets the GroupGEMM time over the mean rank's (1: balanced).
  double rank_rows_max_over_mean = 1;

  double KindUs(KernelKind kind) const;
  // Time of the named kernel (0 when absent).
  double KernelUs(std::string_view name) const;
};

// What one DP group computes in one forward pass.
struct PassLoad {
  double decode_requests = 0;  // each decodes query_len tokens over kv_len cached tokens
  int query_len = 1;
  double kv_len = 0;
  double kv_element_bytes = 2;
  std::vector<PrefillSegment> prefill;

  double DecodeTokens() const { return decode_requests * query_len; }
  double PrefillTokens() const;
  double Tokens() const { return DecodeTokens() + PrefillTokens(); }
};
// `requests` decode requests of `w` (its batch ignored).
PassLoad DecodeLoad(const Workload& w, double requests);

// Every DP group's load in one forward pass. All ranks step together through dispatch and
// combine, so the busiest group sets the pace: `busy_groups` groups run `busy`, the rest
// `other` (which must not be heavier). The GroupGEMM sees the rows of all groups.
struct LayerLoad {
  PassLoad busy;
  PassLoad other;
  int busy_groups = 0;  // 0: every DP group runs `busy`
};

// One MoE layer under `load`. InvalidArgument when the routing model was built for another EP
// or redundant-slot count, or when micro-batching is asked for a load it cannot halve.
StatusOr<LayerBreakdown> ModelLoadedMoeLayer(const PlanContext& ctx, const Deployment& deployment,
                                             const LayerLoad& load, OverlapMode mode,
                                             int routing_layer = 0);
// One dense layer of the busiest group; always runs the whole pass, no overlap.
LayerBreakdown ModelLoadedDenseLayer(const PlanContext& ctx, const Deployment& deployment,
                                     const LayerLoad& load);

// One decode MoE layer (every DP group runs workload.batch requests). InvalidArgument when the
// routing model was built for another EP, or when micro-batching is asked for fewer than 2
// requests per DP group.
StatusOr<LayerBreakdown> ModelMoeLayer(const PlanContext& ctx, const Deployment& deployment,
                                       const Workload& workload, OverlapMode mode,
                                       int routing_layer = 0);
// One dense layer (attention + dense MLP); always runs the whole batch, no overlap.
LayerBreakdown ModelDenseLayer(const PlanContext& ctx, const Deployment& deployment,
                               const Workload& workload);
// Element-wise mean of breakdowns built for the same deployment and mode (trace layers).
LayerBreakdown AverageBreakdowns(const std::vector<LayerBreakdown>& layers);

}  // namespace epserve::planner
