// The DeepSeek-V2/V3 forward pass over a batch of sequence chunks of different lengths
// (prefill chunks and single decode tokens mixed freely). Tokens of all chunks are flattened
// so every projection runs once over the whole batch; attention reads each token's own
// sequence from the latent cache. Routed experts are reached only through ExpertBackend.
// Thread safety: one Forward at a time; parallelism comes from the ThreadPool.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/aligned_vector.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "comm/communicator.h"
#include "model/absorbed_uk.h"
#include "model/config.h"
#include "model/experts.h"
#include "model/forward_pass.h"
#include "model/kv_cache.h"
#include "model/rope.h"
#include "model/weights.h"

namespace epserve {

class SparseIndexer;

// Micro-batching (Overlap::kMicroBatch): dense layers run the whole batch; from the first MoE
// layer on, the batch's tokens split into halves A and B (A the first ceil(T/2) tokens, so a
// sequence cut in two has its earlier positions in A and B's attention finds them in the cache).
// Each layer is five stages (1: input norm, projections, cache rows, W_uk absorb; 2: attention,
// W_uv, O projection, post norm, gate; 3: dispatch send, shared expert; 4: dispatch receive,
// routed experts, combine send; 5: combine receive, residual) and B runs 3 stages behind A:
//   A1 A2 A3 B1 A4 B2 A5 B3 A1' B4 A2' B5 A3' B1' ...
// so A's dispatch travels during B1, A's combine during B2, B's dispatch during A1' and B's
// combine during A2'. The halves join again before the head.

// The checks of a forward pass's inputs, whichever backend runs it (Model and
// cuda::CudaModel call the same ones). CheckKvFits: the cache has the model's layers (with or
// without its MTP layers) and row width. CheckBatch: no empty chunk, a valid number of logits
// rows, block tables long enough for each chunk and inside the pool, token ids in the vocabulary.
// Errors are InvalidArgument naming the sequence, block or token.
Status CheckKvFits(const ModelConfig& config, const KvBlocks& kv);
Status CheckBatch(const ModelConfig& config, const ForwardBatch& batch, const KvBlocks& kv);

// Where Model::Forward runs when it does not run on this CPU: a device implementation of the
// same forward pass over the same ForwardBatch and KvBlocks (whose storage is then the device's;
// docs/architecture.md, "The device seam"). The CUDA backend (cuda::CudaModel) is one.
class ForwardBackend {
 public:
  virtual ~ForwardBackend() = default;
  // "cuda:0 (NVIDIA H200, ...)", for messages.
  virtual std::string Describe() const = 0;
  // As Model::Forward; appends the chunks whose activations went non-finite to *non_finite.
  virtual Status Forward(const ForwardBatch& batch, const KvBlocks& kv, float* logits,
                         std::vector<NonFiniteActivation>* non_finite) = 0;
};

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
  double attention = 0, gemm = 0, gate = 0, shared_expert = 0, routed_experts = 0, lm_head = 0,
         tp_comm = 0;
  // Wall time from the first MoE layer to the end of the last layer of the main pass (the part
  // the overlap modes schedule differently; the phases above overlap each other inside it).
  double moe_layers = 0;
  // Each phase of this minus `earlier`, times `factor` (e.g. 1e3 / steps: ms per step of a span).
  StepTimes Delta(const StepTimes& earlier, double factor) const {
    return {.attention = (attention - earlier.attention) * factor,
            .gemm = (gemm - earlier.gemm) * factor,
            .gate = (gate - earlier.gate) * factor,
            .shared_expert = (shared_expert - earlier.shared_expert) * factor,
            .routed_experts = (routed_experts - earlier.routed_experts) * factor,
            .lm_head = (lm_head - earlier.lm_head) * factor,
            .tp_comm = (tp_comm - earlier.tp_comm) * factor,
            .moe_layers = (moe_layers - earlier.moe_layers) * factor};
  }
};

class Model : public ForwardPass {
 public:
  // config and weights must outlive the model; experts may be replaced with SetExperts.
  Model(const ModelConfig& config, const ModelWeights& weights, ThreadPool& pool);
  ~Model() override;

  // ForwardPass: the family's facts for the engine.
  std::string Describe() const override;
  int vocab_size() const override { return config_.vocab_size; }
  int64_t max_positions() const override { return config_.max_position_embeddings; }
  int num_mtp_layers() const override { return config_.num_nextn_predict_layers; }
  // Every option is supported here (a device backend refuses MTP at its callers).
  Status CheckEngineOptions(KvDType kv_dtype, bool mtp, const OverlapOptions& overlap,
                            kernels::Compute compute) const override;
  // The latent rows (KvRowWidth, IndexKeyBytes) of num_hidden_layers (+ MTP) layers.
  KvLayout CacheLayout(KvDType kv_dtype, bool mtp) const override;

  void SetExperts(ExpertBackend* experts) { experts_ = experts; }
  // Runs Forward on `backend` (not owned; must outlive the model) instead of this CPU; null
  // goes back to the CPU. Tensor/expert parallelism, overlap, compute modes, MTP and kept
  // hidden states are CPU features: with a backend, ForwardMtp is refused (the callers refuse
  // the flags first).
  void SetBackend(ForwardBackend* backend) { backend_ = backend; }
  ForwardBackend* backend() const { return backend_; }
  void SetRouteObserver(RouteObserver observer) { route_observer_ = std::move(observer); }
  // REQUIRES: num_attention_heads % tp.size == 0 (checked by the caller's setup).
  void SetTensorParallel(const TensorParallel& tp);
  // How the projections, experts and LM head multiply (kernels::Compute; default exact). The
  // router stays exact whatever this says: expert choices do not move with the compute mode's
  // rounding. Applies to the next Forward.
  // kFast with a fast kernel also builds W_ukᵀ per local head (absorbed_uk.h) for the absorbed
  // query product.
  void SetCompute(kernels::Compute compute) override;
  kernels::Compute compute() const { return compute_; }
  // How MoE layers overlap communication (applies to the next Forward; ForwardMtp's single
  // layer always runs as kDispatch). Under expert parallelism every rank must use the same
  // options: the number of exchanges per layer follows from them.
  void SetOverlap(const OverlapOptions& overlap) override { overlap_ = overlap; }
  const OverlapOptions& overlap() const { return overlap_; }
  // Whether the last Forward ran its MoE layers as two micro-batches; how many Forwards did, of
  // how many.
  bool last_split() const { return last_split_; }
  int64_t split_forwards() const { return split_forwards_; }
  int64_t forwards() const { return forwards_; }

  // Runs the batch, writing each token's latent row into its block of `kv`, and writes the
  // logits of the last token of each chunk that wants them to logits [those chunks, vocab], in
  // chunk order. A batch without tokens still runs every layer's collectives (expert
  // parallelism needs every rank in every step). Errors: unknown token ids, a block table too
  // short for its chunk, a block id outside the pool.
  Status Forward(const ForwardBatch& batch, const KvBlocks& kv, float* logits) override;
  // The MTP module (multi-token prediction, DeepSeek-V3; module 0 of num_nextn_predict_layers)
  // over a batch shaped like Forward's: chunk token i is the token *after* position start + i,
  // and hidden_rows gives, for every token of the batch in order, the row of hidden() (the
  // last Forward's final-normed hidden states) at that position. Writes the
  // module's own latent rows into cache layer num_hidden_layers of `kv` and the logits of each
  // wanting chunk's last num_logits tokens (the draft for the position after next). Like Forward,
  // an empty batch still runs the module's collectives. Non-finite values are not tracked here
  // (a draft only changes speed, never output).
  // REQUIRES: kv has num_hidden_layers + num_nextn_predict_layers layers.
  Status ForwardMtp(const ForwardBatch& batch, std::span<const int64_t> hidden_rows,
                    const KvBlocks& kv, float* logits) override;
  // Whether Forward keeps every token's final-normed hidden state in hidden() (for ForwardMtp).
  void SetKeepHidden(bool keep) override { keep_hidden_ = keep; }
  // [tokens of the last Forward, hidden_size] when SetKeepHidden(true).
  const AlignedVector<float>& hidden() const { return hidden_; }
  // The same over a LatentKvCache: each chunk's start and blocks come from its slot, and the
  // slots' lengths advance on success. Every chunk produces logits.
  Status Forward(const ForwardBatch& batch, LatentKvCache& cache, float* logits);

  const ModelConfig& config() const { return config_; }
  const StepTimes& times() const { return times_; }
  // The chunks of the last Forward whose hidden state went non-finite, in chunk order, each at
  // the first layer it happened. Forward still returns Ok and runs every layer for them (so the
  // collectives of expert parallelism stay in step); the caller fails those sequences (the
  // engine does in Engine::Complete). Each layer's output is checked once (one pass over
  // tokens x hidden), the embedding rows too.
  const std::vector<NonFiniteActivation>& non_finite() const override { return non_finite_; }

 private:
  struct Workspace;
  // Validates the batch and fills the whole-batch workspace's per-token tables and embedding rows.
  Status Prepare(const ForwardBatch& batch, const KvBlocks& kv, const WeightView& embed);
  // Final norm and head: the logits rows the chunks want; every token's normed row into
  // `hidden` unless null.
  void Head(const ForwardBatch& batch, const std::vector<float>& norm, const WeightView& head,
            float* logits, AlignedVector<float>* hidden);
  // Decoder layer l (an MTP module's block for l >= num_hidden_layers), cache layer l, over
  // the tokens of w, as kNone or kDispatch.
  Status RunLayer(int layer, const KvBlocks& kv, Workspace& w, Overlap mode);
  // Stage 1..5 of layer l over w (see the micro-batching comment above); MoE stages use expert
  // slot `slot`. Dense layers do their MLP in stage 2 and nothing in 3 and 4.
  Status RunStage(int stage, int layer, const KvBlocks& kv, Workspace& w, int slot);
  // How the whole batch runs its MoE layers: kNone stays kNone, the others overlap dispatch.
  Overlap WholeBatchOverlap() const {
    return overlap_.mode == Overlap::kNone ? Overlap::kNone : Overlap::kDispatch;
  }
  // Layers [first, num_hidden_layers) as two micro-batches of ws_.
  Status RunMicroBatches(int first, const KvBlocks& kv);
  Status AttentionIn(int layer, const KvBlocks& cache, Workspace& w);   // stage 1
  Status AttentionOut(int layer, const KvBlocks& cache, Workspace& w);  // stage 2, to o_proj
  void Gate(int layer, Workspace& w);
  Status MoeSend(int layer, Workspace& w, int slot);  // stage 3 without the shared expert
  void SharedExpert(int layer, Workspace& w);
  // Stage 5: combine receive, + shared expert (run here first with run_shared), TP sum, residual.
  Status MoeReceive(int layer, Workspace& w, int slot, bool run_shared);
  // Records the chunks whose rows of w's hidden state turned non-finite at `layer`.
  void CheckFinite(int layer, const Workspace& w);

  const ModelConfig& config_;
  const ModelWeights& weights_;
  ThreadPool& pool_;
  std::unique_ptr<LocalExperts> local_experts_;
  ExpertBackend* experts_;
  ForwardBackend* backend_ = nullptr;
  RouteObserver route_observer_;
  RopeTable rope_;
  // DeepSeek-V3.2's lightning indexer (config.sparse); null for dense-attention families. The
  // sparse-attention seam: it writes its keys beside the latent rows in stage 1 and hands
  // attention the positions each token reads (docs/architecture.md).
  std::unique_ptr<SparseIndexer> indexer_;
  TensorParallel tp_;
  kernels::Compute compute_ = kernels::Compute::kExact;
  AbsorbedUk uk_t_;  // built for kFast when a fast kernel runs (SetCompute)
  void PrepareAbsorbedUk();
  OverlapOptions overlap_;
  int first_moe_;  // the first MoE layer of the main model; num_hidden_layers if none
  bool last_split_ = false;
  int64_t split_forwards_ = 0, forwards_ = 0;
  std::unique_ptr<Workspace> ws_;       // the whole batch
  std::unique_ptr<Workspace> half_[2];  // micro-batches A and B
  // With a route observer under micro-batching: every MoE layer's routing for the whole batch,
  // reported in layer order once the halves join.
  std::vector<int32_t> routed_ids_;
  std::vector<float> routed_weights_;
  bool keep_hidden_ = false;
  AlignedVector<float> hidden_;
  StepTimes times_;
  std::vector<NonFiniteActivation> non_finite_;
  std::vector<uint8_t> chunk_non_finite_;  // per chunk of the current Forward: already recorded
};

}  // namespace epserve
