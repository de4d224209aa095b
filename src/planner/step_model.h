// A whole decode step of one deployment: dense layers + MoE layers + MTP draft passes + LM head,
// the memory fit per GPU, and the resulting output speed per request and throughput per machine.
// Thread safety: pure functions of their arguments.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "planner/layer_model.h"

namespace epserve::planner {

// Bytes per GPU (decimal GB in messages).
struct MemoryFit {
  double weight_bytes = 0;  // this rank's weights (its experts, replicated + TP-split parts)
  double kv_bytes_per_request = 0;
  double reserve_bytes = 0;  // efficiency.json memory.reserve_gb
  double capacity_bytes = 0;
  double free_for_kv_bytes = 0;  // capacity - weights - reserve (may be negative)
  int max_batch = 0;             // requests per DP group whose KV fits (each TP rank keeps a copy)
  bool weights_fit = false;
  bool batch_fits = false;
};
MemoryFit EstimateMemory(const PlanContext& ctx, const Deployment& deployment,
                         const Workload& workload);
// InvalidArgument with the numbers when the weights or the batch do not fit.
Status CheckMemory(const MemoryFit& fit, const PlanContext& ctx, const Deployment& deployment,
                   const Workload& workload);

struct StepOptions {
  std::optional<OverlapMode> overlap;  // nullopt: the fastest mode for this point
  bool require_memory_fit = true;      // error out when the batch does not fit
};

struct StepEstimate {
  OverlapMode mode = OverlapMode::kNone;
  LayerBreakdown moe_layer;  // averaged over routing-trace layers
  LayerBreakdown dense_layer;
  double moe_layers_us = 0;    // all MoE layers
  double dense_layers_us = 0;  // all dense layers
  double mtp_us = 0;           // draft passes (MTP layer + eh_proj + LM head each)
  double lm_head_us = 0;
  double overhead_us = 0;
  double step_us = 0;
  double tokens_per_step = 0;         // per request, after acceptance
  double speed = 0;                   // output tokens/s per request
  double throughput_per_machine = 0;  // output tokens/s
  double throughput_per_gpu = 0;
  MemoryFit memory;
  std::vector<std::string> notes;
};

StatusOr<StepEstimate> EstimateStep(const PlanContext& ctx, const Deployment& deployment,
                                    const Workload& workload, const StepOptions& options);

}  // namespace epserve::planner
