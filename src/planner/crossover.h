// Where two micro-batches start to pay (SPEC §5: they lose below some batch, because halving
// the batch makes every GEMM less efficient, and win above it, where the hidden exchange is worth
// more). The engine's `--overlap auto` splits a step from this batch on.
// Thread safety: a pure function of its arguments.
#pragma once

#include "base/status.h"
#include "planner/deployment.h"
#include "planner/layer_model.h"

namespace epserve::planner {

struct Crossover {
  int batch = 0;  // the smallest batch in [2, max_batch] where micro-batching wins; 0: none
  // At that batch (or at max_batch when none): the MoE layer under each mode.
  double dispatch_us = 0, microbatch_us = 0;
};

// Compares ModelMoeLayer under kDispatchOverlap and kMicroBatch for workload.batch = 2 ..
// max_batch (requests per DP group). REQUIRES: max_batch >= 2.
StatusOr<Crossover> MicroBatchCrossover(const PlanContext& ctx, const Deployment& deployment,
                                        Workload workload, int max_batch);

}  // namespace epserve::planner
