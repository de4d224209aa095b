#include "planner/crossover.h"

namespace epserve::planner {

StatusOr<Crossover> MicroBatchCrossover(const PlanContext& ctx, const Deployment& d, Workload w,
                                        int max_batch) {
  if (max_batch < 2) return Status::InvalidArgument("crossover search needs max_batch >= 2");
  Crossover c;
  for (int b = 2; b <= max_batch; ++b) {
    w.batch = b;
    ASSIGN_OR_RETURN(LayerBreakdown dispatch,
                     ModelMoeLayer(ctx, d, w, OverlapMode::kDispatchOverlap));
    ASSIGN_OR_RETURN(LayerBreakdown micro, ModelMoeLayer(ctx, d, w, OverlapMode::kMicroBatch));
    c.dispatch_us = dispatch.total_us;
    c.microbatch_us = micro.total_us;
    if (micro.total_us < dispatch.total_us) {
      c.batch = b;
      return c;
    }
  }
  return c;
}

}  // namespace epserve::planner
