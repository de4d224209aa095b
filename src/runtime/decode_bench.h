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
  // When > 0: each sequence starts with this many cached positions, written at random (no
  // prefill: latent rows and, for V3.2, indexer keys), and one untimed step replaces the prompt.
  // The long-context case (a 32K prefill at real shapes would take the CPU hours).
  int64_t context = 0;
  int decode_steps = 16;
  kernels::Compute compute = kernels::Compute::kExact;
  // llama-batched-bench's workload: every sequence's prompt and every token fed is token 0, so
  // all sequences of a batch route alike (the experts of one token per layer). Otherwise each
  // sequence has its own prompt and greedy tokens (distinct routes: the realistic case).
  bool same_tokens = false;
};

struct DecodeBenchRow {
  int batch = 0;
  double tokens_per_s = 0;
  double step_ms = 0;
  double weight_bytes_per_step = 0;  // dense + touched experts
  double kv_bytes_per_step = 0;
  double experts_touched_per_layer = 0;
  double achieved_gbps = 0;  // (weights + kv) / step time, over all steps
  // The median step (by time): its time, and its own bytes / time. On a noisy machine this is
  // the typical step; the mean above includes the steps a neighbour slowed down.
  double median_step_ms = 0;
  double median_step_gbps = 0;
  StepTimes phase_ms;  // per decode step, ms in each phase (model.h); the rest
                       // of step_ms is norms, residuals, sampling glue
  // The step's work by kind, per step (means): bytes of the weights every token reads (dense:
  // attention, dense and shared MLPs, routers, LM head) and of the routed experts touched, and
  // floating-point operations (2 per multiply-add) of each kind and of attention over the cache.
  double dense_bytes_per_step = 0;
  double routed_bytes_per_step = 0;
  double dense_flops_per_step = 0;
  double routed_flops_per_step = 0;
  double attention_flops_per_step = 0;  // with sparse attention: the indexer's scores + top-k MLA
};

// The least time a step can take, ms: for each kind of work (dense weights, routed experts,
// attention over the KV cache) the longer of moving its bytes at `read_gbps` and doing its
// operations at `peak_gflops`, summed (the kinds run one after another). Where it exceeds
// bytes / bandwidth, the step is compute-bound at that rate and the bandwidth fraction cannot
// reach 100%: the ratio of the two is the best fraction of read bandwidth attainable.
double DecodeStepFloorMs(const DecodeBenchRow& row, double read_gbps, double peak_gflops);
// The step's (weight + KV) bytes at read_gbps, ms: its bandwidth roofline.
double DecodeStepBandwidthMs(const DecodeBenchRow& row, double read_gbps);

StatusOr<std::vector<DecodeBenchRow>> RunDecodeBench(const LoadedModel& model, ThreadPool& pool,
                                                     const DecodeBenchOptions& options);

}  // namespace epserve
