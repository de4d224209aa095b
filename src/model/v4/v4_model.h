// DeepSeek-V4's forward pass on the CPU (docs/v4-model.md §4-§8) behind the engine's
// model-family seam (model/forward_pass.h): the same ForwardBatch of sequence chunks and the same
// paged KvBlocks as DeepSeek-V2/V3, so continuous batching, chunked prefill, preemption and
// prefix reuse run V4 unchanged. "Exact" numerics as tests/reference/reference_v4.py
// --numerics exact: float32 activations, exact weights, and the model's own quantizations only
// (q8_64 of the KV entries' and attention compressor entries' non-rotary dims; Hadamard + q4 of
// the indexer's queries and keys). No bfloat16 rounding of activations and no FP8 activation
// quantization in the projections (that is DeepSeek's run, the reference's --numerics deepseek).
//
// The cache (V4CacheRow below; docs/serving-engine.md, "DeepSeek-V4's cache"): everything a
// position contributes to later steps is in its own row of each layer: its window entry, its
// compressor projections (the "partial group" state of DeepSeek's kv_state/score_state is just
// the rows of the group's positions), and, in the row of a group's last position, the group's
// compressed entry and indexer key. A cached prefix of any length therefore restores the window
// and the compressor state at its end, and a chunk may end anywhere inside a group.
//
// The MTP module is not run (its tensors are not bound): num_mtp_layers() is 0.
// Thread safety: one Forward at a time; parallelism comes from the ThreadPool.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/experts.h"
#include "model/forward_pass.h"
#include "model/model.h"
#include "model/v4/v4_config.h"
#include "model/v4/v4_ops.h"
#include "model/v4/v4_weights.h"

namespace epserve::v4 {

// A position's cache record is every layer's row, one after the other (KvBlocks of one "layer"
// whose row is the record: no layer pads to the widest). Where each part of layer l's row sits
// in the record (float32 elements, from the layer's base); absent parts have width 0.
//   kv      [Dh]      the window entry (K = V) of this position: normed, RoPE, q8_64
//   kappa   [c Dh]    attention compressor projections of this position (ratio != 0)
//   sigma   [c Dh]    its gate scores, ape[pos % ratio] added
//   entry   [Dh]      compressed entry of the group ending at this position (else unused)
//   ikappa, isigma [2 Di], ikey [Di]: the indexer compressor's, ratio 4 only
struct V4CacheRow {
  int64_t kv = 0, kappa = 0, sigma = 0, entry = 0, ikappa = 0, isigma = 0, ikey = 0, width = 0;
  static V4CacheRow Of(const V4Config& c, int ratio, int64_t base);
};
// Elements of a position's record (all layers).
int V4CacheRowWidth(const V4Config& c);

class V4Model : public ForwardPass {
 public:
  V4Model(const V4Weights& weights, ThreadPool& pool);

  const V4Config& config() const { return c_; }
  // Where the routed experts run (not owned; null: this process's, the default). Expert
  // parallelism plugs its backend in here, as for Model::SetExperts.
  void SetExperts(ExpertBackend* experts) {
    experts_ = experts != nullptr ? experts : local_experts_.get();
  }
  // How this process's experts take their inputs: kFp8 rounds them through the dispatch's FP8
  // format (with the config's ue8m0 scales), so one process reproduces an expert-parallel run
  // bit for bit (`generate --expert-input fp8`).
  void SetExpertInput(ExpertInputFormat format);
  // Tensor parallelism inside a DP group. Unlike Model, attention is not split: every TP rank
  // computes all heads over all the step's tokens (replicated, so bit-identical to one process;
  // V4's heads share one K = V entry, so a split would save little but the projections). Each
  // MoE layer's tokens are split as Model splits them (rank r takes [T r / n, T (r + 1) / n)),
  // each routed and shared expert computes its share, and the group sums the disjoint outputs.
  void SetTensorParallel(const TensorParallel& tp) { tp_ = tp; }

  std::string Describe() const override;
  int vocab_size() const override { return static_cast<int>(c_.vocab_size); }
  int64_t max_positions() const override { return c_.max_position_embeddings; }
  int num_mtp_layers() const override { return 0; }
  // Refuses a bf16 cache (the rows hold compressor state in float32), MTP, micro-batching and
  // the fast compute mode, naming the flag.
  Status CheckEngineOptions(KvDType kv_dtype, bool mtp, const OverlapOptions& overlap,
                            kernels::Compute compute) const override;
  KvLayout CacheLayout(KvDType kv_dtype, bool mtp) const override;

  // Errors (InvalidArgument): the checks of CheckBatchShape, a cache of another layout.
  Status Forward(const ForwardBatch& batch, const KvBlocks& kv, float* logits) override;
  const std::vector<NonFiniteActivation>& non_finite() const override { return non_finite_; }
  Status ForwardMtp(const ForwardBatch& batch, std::span<const int64_t> hidden_rows,
                    const KvBlocks& kv, float* logits) override;
  void SetKeepHidden(bool) override {}
  void SetOverlap(const OverlapOptions&) override {}
  void SetCompute(kernels::Compute) override {}

 private:
  struct Step;  // the batch's per-token tables and the cache view
  // Attention sublayer of layer l over the step's tokens, a [T, D] -> out [T, D].
  void Attention(int l, const Step& s, const float* a, float* out);
  // Writes the step's compressor projections into the rows, then the entries of every group
  // that completes in this step.
  void Compress(const V4Compressor& w, int l, int ratio, bool indexer, const Step& s,
                const float* a);
  // Indexer scores of a query over a sequence's first n entries -> chosen entries (<= topk).
  void IndexSelect(int l, const Step& s, int64_t token, const float* iq, const float* iw, int64_t n,
                   std::vector<int32_t>* chosen) const;
  Status Moe(int l, const Step& s, const float* x, float* out);
  // HC pre: X [T, M, D] -> y [T, D] and each token's mix.
  void HcPre(const V4Hc& hc, int64_t T, const float* X, float* y, std::vector<HcMix>* mix);
  void CheckFinite(int l, const Step& s, const float* X);

  const V4Weights& w_;
  const V4Config& c_;
  ThreadPool& pool_;
  std::vector<double> freqs_plain_, freqs_compressed_;
  std::vector<V4CacheRow> rows_;  // per layer
  int row_width_ = 0;
  std::unique_ptr<LocalExperts> local_experts_;
  ExpertBackend* experts_;
  TensorParallel tp_;
  MlpScratch mlp_scratch_;
  AlignedVector<float> shared_out_;
  std::vector<NonFiniteActivation> non_finite_;
  std::vector<uint8_t> chunk_bad_;
};

}  // namespace epserve::v4
