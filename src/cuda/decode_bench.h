// `epserve bench decode --device cuda`: decode throughput on one GPU at a model's real shapes,
// with no checkpoint: weights made in device memory (DeviceWeights::Synthetic), a latent cache
// whose first `context` positions of every sequence are filled with random rows (no prefill),
// then timed decode steps through CudaModel::Forward, one token per sequence at positions
// context, context + 1, ... Beside each batch: the bytes a step must read and that over the step
// time, against the device's own HBM bandwidth measured in the same run (a device-to-device
// copy). A benchmark: it reports, never asserts. docs/benchmarks.md, "GPU decode".
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cuda/device.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/synthetic.h"

namespace epserve::cuda {

// What each step feeds a sequence.
enum class DecodeTokens {
  kGreedy,  // the argmax of its last logits (first step: a token of its own)
  kSame,    // token 0 for every sequence (llama-batched-bench's workload)
};

struct GpuDecodeBenchOptions {
  ModelConfig config;
  WeightDType dtype = WeightDType::kBF16;
  uint64_t seed = 0;
  int device = 0;
  std::vector<int> batches = {1, 32, 128};
  int context = 1024;    // cached positions per sequence before the first step
  int steps = 20;        // timed steps per batch size
  int warmup_steps = 3;  // untimed steps before them
  KvDType kv_dtype = KvDType::kBF16;
  int64_t block_size = 64;  // positions per cache block
  DecodeTokens tokens = DecodeTokens::kGreedy;
  double bandwidth_gib = 2.0;  // size of the copy that measures HBM bandwidth
  // Progress lines ("making weights: 12.0 / 31.4 GB, 35 GB/s"); may be null.
  std::function<void(const std::string& line)> log;
};

// Per step, means over the timed steps. Bytes are what the step must read at least once:
//   dense: every layer's attention projections, norms, dense MLP, router and shared experts,
//          and the batch's embedding rows;
//   routed: the distinct routed experts the step touches per MoE layer, times an expert's bytes
//          (expected for uniform routing: E (1 - (1 - k/E)^batch); routes are not observed);
//   lm_head: the LM head;
//   kv: each sequence's cached rows 0 .. position, every layer.
struct GpuDecodeBenchRow {
  int batch = 0;
  double tokens_per_s = 0;
  double step_ms = 0, median_step_ms = 0, min_step_ms = 0;
  double experts_per_layer = 0;  // expected distinct routed experts per MoE layer
  double dense_bytes = 0, routed_bytes = 0, lm_head_bytes = 0, kv_bytes = 0;
  double total_bytes() const { return dense_bytes + routed_bytes + lm_head_bytes + kv_bytes; }
  double achieved_gbps = 0;  // total_bytes / step_ms
  double median_gbps = 0;    // total_bytes / median_step_ms
};

struct GpuDecodeBenchResult {
  DeviceInfo device;
  int64_t weight_bytes = 0;    // device memory of the weights
  double weights_seconds = 0;  // making them
  int64_t kv_bytes = 0;        // device memory of the latent cache
  int moe_layers = 0;
  // (bytes read + bytes written) / time of the best of several device-to-device copies of
  // bandwidth_gib: the HBM bandwidth a streaming kernel can reach on this device.
  double hbm_gbps = 0;
  std::vector<GpuDecodeBenchRow> rows;
};

// Expected distinct experts when `tokens` tokens each choose `top_k` of `num_experts` uniformly.
double ExpectedDistinctExperts(int num_experts, int top_k, int64_t tokens);

// Errors: bad options, a model that does not fit the device (named with its size and the free
// memory; a deep model needs fewer layers, config.h's WithLayers), any CUDA error.
StatusOr<GpuDecodeBenchResult> RunGpuDecodeBench(const GpuDecodeBenchOptions& options);

}  // namespace epserve::cuda
