// The DeepSeek-V2/V3 forward pass over a batch of sequence chunks of different lengths
// (prefill chunks and single decode tokens mixed freely). Tokens of all chunks are flattened
// so every projection runs once over the whole batch; attention reads each token's own
// sequence from the latent cache. Routed experts are reached only through ExpertBackend.
// Thread safety: one Forward at a time; parallelism comes from the ThreadPool.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "comm/communicator.h"
#include "model/config.h"
#include "model/experts.h"
#include "model/kv_cache.h"
#include "model/rope.h"
#include "model/weights.h"

namespace epserve {

// One sequence's new tokens for this step. They occupy positions
// [cache.length(slot), cache.length(slot) + tokens.size()).
struct SequenceChunk {
  int slot = 0;
  std::vector<int32_t> tokens;
  uint32_t sequence_id = 0;  // the request's id, for traces and routing keys
};

struct ForwardBatch {
  std::vector<SequenceChunk> chunks;
};

// Called for each MoE layer with the batch's routing decisions (for traces and stats), with each
// token's sequence id and position.
struct RouteEvent {
  int layer = 0;
  int64_t num_tokens = 0;
  int top_k = 0;
  const int32_t* expert_ids = nullptr;  // [num_tokens, top_k]
  const float* weights = nullptr;       // [num_tokens, top_k]
  const uint32_t* sequence_ids = nullptr;
  const int64_t* positions = nullptr;
};
using RouteObserver = std::function<void(const RouteEvent& event)>;

// Tensor parallelism inside a DP group (SPEC §3): the group's ranks split the attention heads
// (latent projections and cache replicated, per-head outputs all-gathered), and split the
// tokens of each MoE layer so every routed expert computes each token once; the group then
// sums the MoE outputs. size == 1 means no TP.
struct TensorParallel {
  int rank = 0;
  int size = 1;
  comm::Communicator* group = nullptr;  // the DP group's ranks, rank order = TP rank
};

// Wall time spent per part of the step, accumulated over Forward calls (seconds).
struct StepTimes {
  double attention = 0, gemm = 0, gate = 0, shared_expert = 0, routed_experts = 0, lm_head = 0, tp_comm = 0;
  // Each phase of this minus `earlier`, times `factor` (e.g. 1e3 / steps: ms per step of a span).
  StepTimes Delta(const StepTimes& earlier, double factor) const {
    return {.attention = (attention - earlier.attention) * factor,
            .gemm = (gemm - earlier.gemm) * factor,
            .gate = (gate - earlier.gate) * factor,
            .shared_expert = (shared_expert - earlier.shared_expert) * factor,
            .routed_experts = (routed_experts - earlier.routed_experts) * factor,
            .lm_head = (lm_head - earlier.lm_head) * factor,
            .tp_comm = (tp_comm - earlier.tp_comm) * factor};
  }
};

class Model {
 public:
  // config and weights must outlive the model; experts may be replaced with SetExperts.
  Model(const ModelConfig& config, const ModelWeights& weights, ThreadPool& pool);
  ~Model();

  void SetExperts(ExpertBackend* experts) { experts_ = experts; }
  void SetRouteObserver(RouteObserver observer) { route_observer_ = std::move(observer); }
  // REQUIRES: num_attention_heads % tp.size == 0 (checked by the caller's setup).
  void SetTensorParallel(const TensorParallel& tp) { tp_ = tp; }

  // Runs the batch, appends its tokens to the cache, and writes the logits of the last token of
  // each chunk to logits [chunks, vocab]. Errors: unknown token ids, cache overflow.
  Status Forward(const ForwardBatch& batch, LatentKvCache& cache, float* logits);

  const ModelConfig& config() const { return config_; }
  const StepTimes& times() const { return times_; }

 private:
  struct Workspace;
  Status RunLayer(int layer, LatentKvCache& cache);
  Status Attention(int layer, LatentKvCache& cache);
  Status Moe(int layer);

  const ModelConfig& config_;
  const ModelWeights& weights_;
  ThreadPool& pool_;
  std::unique_ptr<LocalExperts> local_experts_;
  ExpertBackend* experts_;
  RouteObserver route_observer_;
  RopeTable rope_;
  TensorParallel tp_;
  std::unique_ptr<Workspace> ws_;
  StepTimes times_;
};

}  // namespace epserve
