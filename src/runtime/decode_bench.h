// `epserve bench decode`: decode throughput at several batch sizes, the bytes each step really
// reads (dense weights, the routed experts its tokens touch, the latent KV cache), and that as
// a fraction of the memory bandwidth measured in the same run. A benchmark: it reports, never
// asserts.
#pragma once

#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/model.h"
#include "runtime/loaded_model.h"

namespace epserve {

struct DecodeBenchOptions {
  std::vector<int> batches = {1, 8, 32};
  int prompt_len = 64;
  int decode_steps = 16;
};

struct DecodeBenchRow {
  int batch = 0;
  double tokens_per_s = 0;
  double step_ms = 0;
  double weight_bytes_per_step = 0;  // dense + touched experts
  double kv_bytes_per_step = 0;
  double experts_touched_per_layer = 0;
  double achieved_gbps = 0;          // (weights + kv) / step time, over all steps
  // The median step (by time): its time, and its own bytes / time. On a noisy machine this is
  // the typical step; the mean above includes the steps a neighbour slowed down.
  double median_step_ms = 0;
  double median_step_gbps = 0;
  StepTimes phase_ms;                // per decode step, ms in each phase (model.h); the rest
                                     // of step_ms is norms, residuals, sampling glue
};

StatusOr<std::vector<DecodeBenchRow>> RunDecodeBench(const LoadedModel& model, ThreadPool& pool,
                                                     const DecodeBenchOptions& options);

}  // namespace epserve
