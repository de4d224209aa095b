#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/aligned_vector.h"
#include "base/timer.h"
#include "kernels/gate.h"
#include "kernels/matmul.h"
#include "kernels/matmul_fast.h"
#include "kernels/mla_attention.h"
#include "kernels/ops.h"
#include "model/sparse_indexer.h"
#include "placement/token_key.h"

namespace epserve {

// Per-step buffers, sized for the current batch (T tokens).
struct Model::Workspace {
  int64_t T = 0;
  std::vector<int64_t> token_pos;
  std::vector<uint32_t> token_seq;
  std::vector<uint64_t> token_key;
  std::vector<const int32_t*> token_blocks;  // each token's block table
  std::vector<int32_t> token_block;          // the block its own row goes to
  std::vector<int32_t> token_chunk;          // the chunk it belongs to
  int64_t offset = 0;                        // a micro-batch's first token in the whole batch
  int64_t moe_begin = 0, moe_count = 0;      // the tokens this TP rank sends to the experts
  AlignedVector<float> x, xn, q_a, q, kv_a, q_abs, q_pe, o_lat, o, o_gather, o_full, attn_out,
      ffn_out, shared_out;
  AlignedVector<float> router_logits, gate_scratch, weights, attn_scratch;
  AlignedVector<float> last, mtp_in;  // rows the head reads; the MTP module's [embedding | hidden]
  std::vector<int32_t> expert_ids;
  std::vector<kernels::MatMulTArgs> uk_args;      // per-head W_uk products
  std::vector<kernels::MatMulArgs> uk_fast_args;  // the same on W_ukᵀ (--compute fast)
  std::vector<kernels::MatMulArgs> uv_args;       // per-head W_uv products
  MlpScratch mlp;
  AttentionSelection selection;  // with sparse attention: the positions each token reads
};

Model::Model(const ModelConfig& config, const ModelWeights& weights, ThreadPool& pool)
    : config_(config),
      weights_(weights),
      pool_(pool),
      local_experts_(std::make_unique<LocalExperts>(weights, pool)),
      experts_(local_experts_.get()),
      rope_(config),
      ws_(std::make_unique<Workspace>()),
      half_{std::make_unique<Workspace>(), std::make_unique<Workspace>()} {
  if (config.sparse.enabled()) indexer_ = std::make_unique<SparseIndexer>(config, rope_, pool);
  for (first_moe_ = 0; first_moe_ < config.num_hidden_layers; ++first_moe_)
    if (weights.Layer(first_moe_).moe) break;
}

Model::~Model() = default;

void Model::SetCompute(kernels::Compute compute) {
  compute_ = compute;
  PrepareAbsorbedUk();
}

void Model::SetTensorParallel(const TensorParallel& tp) {
  tp_ = tp;
  uk_t_ = AbsorbedUk();
  PrepareAbsorbedUk();
}

void Model::PrepareAbsorbedUk() {
  if (compute_ != kernels::Compute::kFast || !kernels::FastMatMulAvailable()) {
    uk_t_ = AbsorbedUk();
    return;
  }
  if (!uk_t_.empty()) return;
  const int heads = config_.num_attention_heads / tp_.size;
  uk_t_ = AbsorbedUk(config_, weights_, tp_.rank * heads, heads);
}

namespace {
// Copies tokens [begin, begin + count) of `from` (tables and hidden rows) into `to`.
template <typename W>
void CopyTokens(const W& from, int64_t begin, int64_t count, int hidden, W* to) {
  auto part = [&](const auto& v, auto* out) {
    out->assign(v.begin() + begin, v.begin() + begin + count);
  };
  to->T = count;
  to->offset = begin;
  part(from.token_pos, &to->token_pos);
  part(from.token_seq, &to->token_seq);
  part(from.token_key, &to->token_key);
  part(from.token_blocks, &to->token_blocks);
  part(from.token_block, &to->token_block);
  part(from.token_chunk, &to->token_chunk);
  to->x.resize(count * hidden);
  if (count > 0) std::memcpy(to->x.data(), &from.x[begin * hidden], count * hidden * sizeof(float));
}
}  // namespace

Status Model::Forward(const ForwardBatch& batch, LatentKvCache& cache, float* logits) {
  ForwardBatch b = batch;
  for (auto& ch : b.chunks) {
    if (ch.slot < 0 || ch.slot >= cache.num_slots())
      return Status::InvalidArgument("sequence slot " + std::to_string(ch.slot) + " out of range");
    const int64_t end = cache.length(ch.slot) + static_cast<int64_t>(ch.tokens.size());
    if (end > cache.max_positions())
      return Status::InvalidArgument("sequence in slot " + std::to_string(ch.slot) + " needs " +
                                     std::to_string(end) + " positions; the cache holds " +
                                     std::to_string(cache.max_positions()));
    ch.start = cache.length(ch.slot);
    ch.blocks = {cache.table(ch.slot), 1};
    ch.want_logits = true;
    ch.num_logits = 1;
  }
  RETURN_IF_ERROR(Forward(b, cache.blocks(), logits));
  for (const auto& ch : b.chunks)
    cache.set_length(ch.slot, ch.start + static_cast<int64_t>(ch.tokens.size()));
  return Status::Ok();
}

std::string Model::Describe() const {
  return "DeepSeek-V2/V3 (" + std::to_string(config_.num_hidden_layers) + " layers, hidden " +
         std::to_string(config_.hidden_size) + ", " + std::to_string(config_.n_routed_experts) +
         " routed experts" + (config_.sparse.enabled() ? ", V3.2 sparse attention)" : ")");
}

Status Model::CheckEngineOptions(KvDType, bool mtp, const OverlapOptions&, kernels::Compute) const {
  if (mtp && config_.num_nextn_predict_layers < 1)
    return Status::InvalidArgument(
        "--mtp on: the model has no MTP module (num_nextn_predict_layers is 0)");
  return Status::Ok();
}

KvLayout Model::CacheLayout(KvDType kv_dtype, bool mtp) const {
  return {.num_layers = config_.num_hidden_layers + (mtp ? config_.num_nextn_predict_layers : 0),
          .row_width = KvRowWidth(config_, kv_dtype),
          .index_bytes = IndexKeyBytes(config_)};
}

Status CheckKvFits(const ModelConfig& c, const KvBlocks& kv) {
  if ((kv.num_layers != c.num_hidden_layers &&
       kv.num_layers != c.num_hidden_layers + c.num_nextn_predict_layers) ||
      kv.row_width != KvRowWidth(c, kv.dtype) || kv.index_bytes != IndexKeyBytes(c))
    return Status::InvalidArgument("KV cache of " + std::to_string(kv.num_layers) + " layers x " +
                                   std::to_string(kv.row_width) + " does not fit the model");
  return Status::Ok();
}

Status CheckBatch(const ModelConfig& c, const ForwardBatch& batch, const KvBlocks& kv) {
  return CheckBatchShape(batch, kv, c.vocab_size);
}

Status Model::Prepare(const ForwardBatch& batch, const KvBlocks& kv, const WeightView& embed) {
  const ModelConfig& c = config_;
  Workspace& w = *ws_;
  const int H = c.hidden_size;
  RETURN_IF_ERROR(CheckBatch(c, batch, kv));
  int64_t T = 0, max_pos = 0;
  for (const SequenceChunk& ch : batch.chunks) {
    T += static_cast<int64_t>(ch.tokens.size());
    max_pos = std::max(max_pos, ch.start + static_cast<int64_t>(ch.tokens.size()));
  }
  w.T = T;
  w.token_pos.resize(T);
  w.token_seq.resize(T);
  w.token_key.resize(T);
  w.token_blocks.resize(T);
  w.token_block.resize(T);
  w.token_chunk.resize(T);
  w.x.resize(T * H);
  int64_t t = 0;
  for (size_t ci = 0; ci < batch.chunks.size(); ++ci) {
    const SequenceChunk& ch = batch.chunks[ci];
    for (size_t i = 0; i < ch.tokens.size(); ++i, ++t) {
      w.token_chunk[t] = static_cast<int32_t>(ci);
      w.token_pos[t] = ch.start + static_cast<int64_t>(i);
      w.token_blocks[t] = ch.blocks.data();
      w.token_block[t] = ch.blocks[w.token_pos[t] / kv.block_size];
      w.token_seq[t] = ch.sequence_id;
      w.token_key[t] = placement::TokenKey(ch.sequence_id, static_cast<uint32_t>(w.token_pos[t]));
      kernels::DequantizeRow(embed, ch.tokens[i], 0, H, &w.x[t * H]);
    }
  }
  rope_.EnsurePositions(max_pos);
  return Status::Ok();
}

void Model::Head(const ForwardBatch& batch, const std::vector<float>& norm, const WeightView& head,
                 float* logits, AlignedVector<float>* hidden) {
  const ModelConfig& c = config_;
  Workspace& w = *ws_;
  const int H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const double t0 = NowSeconds();
  if (hidden != nullptr) {
    // Every token's normalized hidden state (the MTP module's input), logits rows from it.
    hidden->resize(w.T * H);
    for (int64_t t = 0; t < w.T; ++t)
      kernels::RmsNorm(&w.x[t * H], norm.data(), H, eps, &(*hidden)[t * H]);
  }
  int64_t rows = 0;
  for (const auto& ch : batch.chunks) rows += ch.want_logits ? ch.num_logits : 0;
  w.last.resize(std::max<int64_t>(rows, 1) * H);
  rows = 0;
  int64_t t = 0;
  for (const auto& ch : batch.chunks) {
    t += static_cast<int64_t>(ch.tokens.size());
    if (!ch.want_logits) continue;
    for (int64_t r = t - ch.num_logits; r < t; ++r, ++rows) {
      if (hidden != nullptr)
        std::memcpy(&w.last[rows * H], &(*hidden)[r * H], H * sizeof(float));
      else
        kernels::RmsNorm(&w.x[r * H], norm.data(), H, eps, &w.last[rows * H]);
    }
  }
  if (rows > 0)
    kernels::MatMul(
        {.x = w.last.data(), .num_rows = rows, .w = head, .y = logits, .compute = compute_}, pool_);
  times_.lm_head += NowSeconds() - t0;
}

Status Model::Forward(const ForwardBatch& batch, const KvBlocks& kv, float* logits) {
  const ModelConfig& c = config_;
  RETURN_IF_ERROR(CheckKvFits(c, kv));
  if (backend_ != nullptr) {
    non_finite_.clear();
    last_split_ = false;
    ++forwards_;
    return backend_->Forward(batch, kv, logits, &non_finite_).WithContextOnce(backend_->Describe());
  }
  RETURN_IF_ERROR(Prepare(batch, kv, weights_.embed));
  Workspace& w = *ws_;
  // Exchanges in flight move forward between the chunks of every loop, not only between stages
  // (docs/expert-parallelism.md, "Overlap": without it a transfer waits out a whole stage).
  struct HookGuard {
    ThreadPool& pool;
    ~HookGuard() { pool.SetCallerHook(nullptr); }
  } guard{pool_};
  if (experts_->HasTransfers() && overlap_.mode != Overlap::kNone)
    pool_.SetCallerHook([this] { (void)experts_->Progress(); });
  non_finite_.clear();
  chunk_non_finite_.assign(batch.chunks.size(), 0);
  CheckFinite(-1, w);
  last_split_ = false;
  if (overlap_.mode == Overlap::kMicroBatch && first_moe_ < c.num_hidden_layers) {
    last_split_ = true;
    if (overlap_.min_tokens > 1) {
      ASSIGN_OR_RETURN(const int64_t most, experts_->AgreeMax(w.T));
      last_split_ = most >= overlap_.min_tokens;
    }
  }
  const Overlap whole = WholeBatchOverlap();
  const int whole_layers = last_split_ ? first_moe_ : c.num_hidden_layers;
  double moe_start = 0;
  for (int l = 0; l < whole_layers; ++l) {
    if (l == first_moe_) moe_start = NowSeconds();
    RETURN_IF_ERROR(RunLayer(l, kv, w, whole));
    CheckFinite(l, w);
  }
  ++forwards_;
  if (last_split_) {
    ++split_forwards_;
    moe_start = NowSeconds();
    RETURN_IF_ERROR(RunMicroBatches(first_moe_, kv));
  }
  if (first_moe_ < c.num_hidden_layers) times_.moe_layers += NowSeconds() - moe_start;
  Head(batch, weights_.final_norm, weights_.lm_head, logits, keep_hidden_ ? &hidden_ : nullptr);
  return Status::Ok();
}

Status Model::RunMicroBatches(int first, const KvBlocks& kv) {
  const ModelConfig& c = config_;
  Workspace& w = *ws_;
  const int H = c.hidden_size;
  const int64_t ta = (w.T + 1) / 2;
  CopyTokens(w, 0, ta, H, half_[0].get());
  CopyTokens(w, ta, w.T - ta, H, half_[1].get());
  if (route_observer_) {
    routed_ids_.assign(static_cast<size_t>(c.num_hidden_layers) * w.T * c.num_experts_per_tok, -1);
    routed_weights_.assign(routed_ids_.size(), 0.0f);
  }
  // Each half's work is the list of (layer, stage) in order; B starts 3 stages behind A and
  // then the two alternate. Between stages the in-flight exchanges are moved forward.
  const int ops = (c.num_hidden_layers - first) * 5;
  auto run = [&](int h, int op) -> Status {
    const int layer = first + op / 5, stage = op % 5 + 1;
    Workspace& hw = *half_[h];
    RETURN_IF_ERROR(RunStage(stage, layer, kv, hw, h));
    if (stage == 5) CheckFinite(layer, hw);
    return experts_->Progress();
  };
  int a = 0, b = 0;
  for (; a < std::min(3, ops); ++a) RETURN_IF_ERROR(run(0, a));
  while (b < ops) {
    RETURN_IF_ERROR(run(1, b++));
    if (a < ops) RETURN_IF_ERROR(run(0, a++));
  }
  for (int h = 0; h < 2; ++h)
    if (half_[h]->T > 0)
      std::memcpy(&w.x[half_[h]->offset * H], half_[h]->x.data(), half_[h]->T * H * sizeof(float));
  if (route_observer_) {
    const int K = c.num_experts_per_tok;
    for (int l = first; l < c.num_hidden_layers; ++l) {
      if (!weights_.Layer(l).moe) continue;
      const size_t at = static_cast<size_t>(l) * w.T * K;
      route_observer_({.layer = l,
                       .num_tokens = w.T,
                       .top_k = K,
                       .expert_ids = &routed_ids_[at],
                       .weights = &routed_weights_[at],
                       .sequence_ids = w.token_seq.data(),
                       .positions = w.token_pos.data()});
    }
  }
  return Status::Ok();
}

Status Model::ForwardMtp(const ForwardBatch& batch, std::span<const int64_t> hidden_rows,
                         const KvBlocks& kv, float* logits) {
  const ModelConfig& c = config_;
  Workspace& w = *ws_;
  const int H = c.hidden_size, L = c.num_hidden_layers;
  if (weights_.mtp.empty())
    return Status::InvalidArgument("the model has no MTP module (num_nextn_predict_layers = 0)");
  if (kv.num_layers != L + c.num_nextn_predict_layers || kv.row_width != KvRowWidth(c, kv.dtype))
    return Status::InvalidArgument("KV cache of " + std::to_string(kv.num_layers) +
                                   " layers has no MTP layer for a model of " + std::to_string(L));
  if (backend_ != nullptr)
    return Status::InvalidArgument(backend_->Describe() + ": MTP does not run on this backend yet");
  const MtpWeights& m = weights_.mtp[0];
  RETURN_IF_ERROR(Prepare(batch, kv, m.embed));
  const int64_t have = static_cast<int64_t>(hidden_.size()) / H;
  if (static_cast<int64_t>(hidden_rows.size()) != w.T)
    return Status::InvalidArgument("MTP pass: " + std::to_string(hidden_rows.size()) +
                                   " hidden rows for " + std::to_string(w.T) + " tokens");
  for (int64_t r : hidden_rows)
    if (r < 0 || r >= have)
      return Status::InvalidArgument("MTP pass: hidden row " + std::to_string(r) +
                                     " outside the main pass's " + std::to_string(have));
  const float eps = static_cast<float>(c.rms_norm_eps);
  // x = eh_proj([enorm(embed(next token)) | hnorm(hidden)]) (DeepSeek-V3 §2.2; vLLM and SGLang
  // feed the main model's final-normed hidden state, as here).
  const double t0 = NowSeconds();
  w.mtp_in.resize(w.T * 2 * H);
  for (int64_t t = 0; t < w.T; ++t) {
    kernels::RmsNorm(&w.x[t * H], m.enorm.data(), H, eps, &w.mtp_in[t * 2 * H]);
    kernels::RmsNorm(&hidden_[hidden_rows[t] * H], m.hnorm.data(), H, eps,
                     &w.mtp_in[t * 2 * H + H]);
  }
  kernels::MatMul(
      {.x = w.mtp_in.data(), .num_rows = w.T, .w = m.eh_proj, .y = w.x.data(), .compute = compute_},
      pool_);
  times_.gemm += NowSeconds() - t0;
  RETURN_IF_ERROR(RunLayer(L, kv, w, WholeBatchOverlap()));
  Head(batch, m.head_norm, m.head, logits, /*hidden=*/nullptr);  // hidden_ stays the main pass's
  return Status::Ok();
}

Status Model::RunLayer(int l, const KvBlocks& kv, Workspace& w, Overlap mode) {
  if (mode == Overlap::kNone && weights_.Layer(l).moe) {
    // Nothing overlaps: the exchange runs start to end, then the shared expert.
    RETURN_IF_ERROR(RunStage(1, l, kv, w, 0));
    RETURN_IF_ERROR(RunStage(2, l, kv, w, 0));
    RETURN_IF_ERROR(MoeSend(l, w, 0));
    RETURN_IF_ERROR(RunStage(4, l, kv, w, 0));
    return MoeReceive(l, w, 0, /*run_shared=*/true);
  }
  for (int stage = 1; stage <= 5; ++stage) RETURN_IF_ERROR(RunStage(stage, l, kv, w, 0));
  return Status::Ok();
}

Status Model::RunStage(int stage, int l, const KvBlocks& kv, Workspace& w, int slot) {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.Layer(l);
  const int H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  switch (stage) {
    case 1:
      w.xn.resize(w.T * H);
      for (int64_t t = 0; t < w.T; ++t)
        kernels::RmsNorm(&w.x[t * H], lw.input_norm.data(), H, eps, &w.xn[t * H]);
      return AttentionIn(l, kv, w);
    case 2: {
      RETURN_IF_ERROR(AttentionOut(l, kv, w));
      for (int64_t i = 0; i < w.T * H; ++i) w.x[i] += w.attn_out[i];
      for (int64_t t = 0; t < w.T; ++t)
        kernels::RmsNorm(&w.x[t * H], lw.post_norm.data(), H, eps, &w.xn[t * H]);
      w.ffn_out.assign(w.T * H, 0.0f);
      if (lw.moe) {
        Gate(l, w);
        return Status::Ok();
      }
      const double t0 = NowSeconds();
      RunMlp(lw.dense, w.xn.data(), w.T, w.ffn_out.data(), w.mlp, pool_, compute_);
      times_.gemm += NowSeconds() - t0;
      for (int64_t i = 0; i < w.T * H; ++i) w.x[i] += w.ffn_out[i];
      return Status::Ok();
    }
    case 3:
      if (!lw.moe) return Status::Ok();
      RETURN_IF_ERROR(MoeSend(l, w, slot));
      SharedExpert(l, w);
      return Status::Ok();
    case 4: {
      if (!lw.moe) return Status::Ok();
      const double t0 = NowSeconds();
      Status st = experts_->Compute(slot);
      times_.routed_experts += NowSeconds() - t0;
      return st;
    }
    case 5:
      return lw.moe ? MoeReceive(l, w, slot, /*run_shared=*/false) : Status::Ok();
  }
  return Status::Internal("no stage " + std::to_string(stage));
}

void Model::CheckFinite(int l, const Workspace& w) {
  const int H = config_.hidden_size;
  if (kernels::AllFinite(w.x.data(), w.T * H)) return;
  // Rare: find the rows, and whether the layer's attention output already held the value.
  for (int64_t t = 0; t < w.T; ++t) {
    const int32_t ci = w.token_chunk[t];
    const float* row = &w.x[t * H];
    const int64_t at = kernels::FirstNonFinite(row, H);
    if (chunk_non_finite_[ci] != 0 || at == H) continue;
    chunk_non_finite_[ci] = 1;
    const char* part = "embedding";
    if (l >= 0)
      part = !kernels::AllFinite(&w.attn_out[t * H], H) ? "attention"
             : weights_.Layer(l).moe                    ? "moe"
                                                        : "mlp";
    non_finite_.push_back({.chunk = static_cast<size_t>(ci),
                           .layer = l,
                           .part = part,
                           .position = w.token_pos[t],
                           .nan = std::isnan(row[at])});
  }
  std::sort(
      non_finite_.begin(), non_finite_.end(),
      [](const NonFiniteActivation& a, const NonFiniteActivation& b) { return a.chunk < b.chunk; });
}

Status Model::AttentionIn(int l, const KvBlocks& cache, Workspace& w) {
  const ModelConfig& c = config_;
  const AttentionWeights& a = weights_.Layer(l).attn;
  const int64_t T = w.T;
  // With TP this rank computes heads [h0, h0 + heads); everything below is per local head.
  const int all_heads = c.num_attention_heads, heads = all_heads / tp_.size, h0 = tp_.rank * heads;
  const int L = c.kv_lora_rank, R = c.qk_rope_head_dim;
  const int nope = c.qk_nope_head_dim, qhd = c.qk_head_dim(), vd = c.v_head_dim, row = c.kv_a_dim();
  const float eps = static_cast<float>(c.rms_norm_eps);
  double t0 = NowSeconds();
  // Projections: the query's first projection and kv_a read the same input, so they run as one
  // parallel loop (SPEC §2's fused q_a + kv_a).
  w.q.resize(T * heads * qhd);
  w.kv_a.resize(T * row);
  const kernels::MatMulArgs kv_a{
      .x = w.xn.data(), .num_rows = T, .w = a.kv_a, .y = w.kv_a.data(), .compute = compute_};
  if (c.q_lora_rank > 0) {
    w.q_a.resize(T * c.q_lora_rank);
    const kernels::MatMulArgs first[] = {
        {.x = w.xn.data(), .num_rows = T, .w = a.q_a, .y = w.q_a.data(), .compute = compute_},
        kv_a};
    kernels::MatMulBatch(first, pool_);
    for (int64_t t = 0; t < T; ++t)
      kernels::RmsNorm(&w.q_a[t * c.q_lora_rank], a.q_a_norm.data(), c.q_lora_rank, eps,
                       &w.q_a[t * c.q_lora_rank]);
    kernels::MatMul({.x = w.q_a.data(),
                     .num_rows = T,
                     .w = a.q_b.RowSlice(int64_t{h0} * qhd, int64_t{heads} * qhd),
                     .y = w.q.data(),
                     .compute = compute_},
                    pool_);
  } else {
    const kernels::MatMulArgs first[] = {
        {.x = w.xn.data(),
         .num_rows = T,
         .w = a.q.RowSlice(int64_t{h0} * qhd, int64_t{heads} * qhd),
         .y = w.q.data(),
         .compute = compute_},
        kv_a};
    kernels::MatMulBatch(first, pool_);
  }
  // Latent cache rows: normalized c_kv and rotated k_pe.
  for (int64_t t = 0; t < T; ++t) {
    float* kv = &w.kv_a[t * row];
    kernels::RmsNorm(kv, a.kv_a_norm.data(), L, eps, kv);
    kernels::ApplyRope(kv + L, rope_.Row(w.token_pos[t]), R);
    cache.WriteRow(w.token_block[t], l, w.token_pos[t] % cache.block_size, kv);
  }
  if (indexer_)
    indexer_->Run(l, a.indexer,
                  {.num_tokens = T,
                   .x = w.xn.data(),
                   .q_latent = w.q_a.data(),
                   .token_pos = w.token_pos.data(),
                   .token_blocks = w.token_blocks.data(),
                   .token_block = w.token_block.data()},
                  cache, &w.selection);
  // Queries: rotate q_pe, absorb W_uk into q_nope.
  w.q_pe.resize(T * heads * R);
  w.q_abs.resize(T * heads * L);
  for (int64_t t = 0; t < T; ++t)
    for (int h = 0; h < heads; ++h) {
      float* qp = &w.q_pe[(t * heads + h) * R];
      std::memcpy(qp, &w.q[(t * heads + h) * qhd + nope], R * sizeof(float));
      kernels::ApplyRope(qp, rope_.Row(w.token_pos[t]), R);
    }
  // All heads' W_uk products in one parallel loop: exact on W_uk (MatMulT), or with
  // --compute fast as MatMuls on W_ukᵀ (absorbed_uk.h).
  if (!uk_t_.empty()) {
    w.uk_fast_args.resize(heads);
    for (int h = 0; h < heads; ++h)
      w.uk_fast_args[h] = {.x = &w.q[h * qhd],
                           .x_stride = heads * qhd,
                           .num_rows = T,
                           .w = uk_t_.Get(l, h),
                           .y = &w.q_abs[h * L],
                           .y_stride = static_cast<int64_t>(heads) * L,
                           .compute = compute_};
    kernels::MatMulBatch(w.uk_fast_args, pool_);
  } else {
    w.uk_args.resize(heads);
    for (int h = 0; h < heads; ++h)
      w.uk_args[h] = {.x = &w.q[h * qhd],
                      .x_stride = heads * qhd,
                      .num_rows = T,
                      .w = a.kv_b.RowSlice(static_cast<int64_t>(h0 + h) * (nope + vd), nope),
                      .y = &w.q_abs[h * L],
                      .y_stride = static_cast<int64_t>(heads) * L};
    kernels::MatMulTBatch(w.uk_args, pool_);
  }
  times_.gemm += NowSeconds() - t0;
  return Status::Ok();
}

Status Model::AttentionOut(int l, const KvBlocks& cache, Workspace& w) {
  const ModelConfig& c = config_;
  const AttentionWeights& a = weights_.Layer(l).attn;
  const int64_t T = w.T;
  const int all_heads = c.num_attention_heads, heads = all_heads / tp_.size, h0 = tp_.rank * heads;
  const int L = c.kv_lora_rank, R = c.qk_rope_head_dim;
  const int nope = c.qk_nope_head_dim, vd = c.v_head_dim, row = c.kv_a_dim();
  double t0 = NowSeconds();
  if (cache.dtype == KvDType::kBF16)
    w.attn_scratch.resize(pool_.num_threads() * kernels::MlaScratchFloats(row));
  w.o_lat.resize(T * heads * L);
  const bool sparse = indexer_ && w.selection.sparse;
  kernels::MlaAttention({.num_tokens = T,
                         .num_heads = heads,
                         .kv_lora_rank = L,
                         .rope_dim = R,
                         .q_abs = w.q_abs.data(),
                         .q_pe = w.q_pe.data(),
                         .cache = cache.LayerView(l),
                         .token_blocks = w.token_blocks.data(),
                         .token_pos = w.token_pos.data(),
                         .token_selected = sparse ? w.selection.lists.data() : nullptr,
                         .token_num_selected = sparse ? w.selection.counts.data() : nullptr,
                         .softmax_scale = static_cast<float>(c.SoftmaxScale()),
                         .out = w.o_lat.data(),
                         .scratch = w.attn_scratch.data()},
                        pool_);
  times_.attention += NowSeconds() - t0;
  t0 = NowSeconds();
  // Values: W_uv per head on the latent output, then the output projection.
  w.o.resize(T * heads * vd);
  w.uv_args.resize(heads);
  for (int h = 0; h < heads; ++h) {
    w.uv_args[h] = {.x = &w.o_lat[h * L],
                    .x_stride = static_cast<int64_t>(heads) * L,
                    .num_rows = T,
                    .w = a.kv_b.RowSlice(static_cast<int64_t>(h0 + h) * (nope + vd) + nope, vd),
                    .y = &w.o[h * vd],
                    .y_stride = static_cast<int64_t>(heads) * vd,
                    .compute = compute_};
  }
  kernels::MatMulBatch(w.uv_args, pool_);
  times_.gemm += NowSeconds() - t0;
  const float* o_all = w.o.data();
  if (tp_.size > 1) {
    // Gather every rank's heads, then put them back in head order per token.
    t0 = NowSeconds();
    const int64_t mine = T * heads * vd;
    w.o_gather.resize(mine * tp_.size);
    RETURN_IF_ERROR(tp_.group->AllGather(w.o.data(), mine * sizeof(float), w.o_gather.data()));
    w.o_full.resize(T * all_heads * vd);
    for (int r = 0; r < tp_.size; ++r)
      for (int64_t t = 0; t < T; ++t)
        std::memcpy(&w.o_full[(t * all_heads + r * heads) * vd],
                    &w.o_gather[r * mine + t * heads * vd], heads * vd * sizeof(float));
    o_all = w.o_full.data();
    times_.tp_comm += NowSeconds() - t0;
  }
  t0 = NowSeconds();
  w.attn_out.resize(T * c.hidden_size);
  kernels::MatMul(
      {.x = o_all, .num_rows = T, .w = a.o, .y = w.attn_out.data(), .compute = compute_}, pool_);
  times_.gemm += NowSeconds() - t0;
  return Status::Ok();
}

void Model::Gate(int l, Workspace& w) {
  const ModelConfig& c = config_;
  const MoeWeights& m = *weights_.Layer(l).moe;
  const int64_t T = w.T;
  const int E = c.n_routed_experts, K = c.num_experts_per_tok;
  const double t0 = NowSeconds();
  w.router_logits.resize(T * E);
  kernels::MatMul({.x = w.xn.data(), .num_rows = T, .w = m.router, .y = w.router_logits.data()},
                  pool_);
  w.gate_scratch.resize(2 * E * static_cast<size_t>(pool_.num_threads()));
  w.expert_ids.resize(T * K);
  w.weights.resize(T * K);
  const kernels::GateOptions gopt = c.GateOpts();
  const float* bias = m.score_bias.empty() ? nullptr : m.score_bias.data();
  // Tokens are independent: a prefill's thousands of top-k selections share out over the
  // threads (decode's few run inline: one chunk).
  pool_.ParallelFor(T, 64, [&](size_t b, size_t e, int thread) {
    float* scratch = w.gate_scratch.data() + 2 * E * static_cast<size_t>(thread);
    for (size_t t = b; t < e; ++t)
      kernels::GateTopK(gopt, &w.router_logits[t * E], bias, scratch, &w.expert_ids[t * K],
                        &w.weights[t * K]);
  });
  if (route_observer_ && &w == ws_.get()) {
    route_observer_({.layer = l,
                     .num_tokens = T,
                     .top_k = K,
                     .expert_ids = w.expert_ids.data(),
                     .weights = w.weights.data(),
                     .sequence_ids = w.token_seq.data(),
                     .positions = w.token_pos.data()});
  } else if (route_observer_ && T > 0) {
    // A micro-batch: reported for the whole batch once the halves join.
    const size_t at = (static_cast<size_t>(l) * ws_->T + w.offset) * K;
    std::copy(w.expert_ids.begin(), w.expert_ids.end(), routed_ids_.begin() + at);
    std::copy(w.weights.begin(), w.weights.end(), routed_weights_.begin() + at);
  }
  // With TP each rank of the group takes a contiguous share of the tokens.
  w.moe_begin = T * tp_.rank / tp_.size;
  w.moe_count = T * (tp_.rank + 1) / tp_.size - w.moe_begin;
  times_.gate += NowSeconds() - t0;
}

Status Model::MoeSend(int l, Workspace& w, int slot) {
  const ModelConfig& c = config_;
  const int H = c.hidden_size, K = c.num_experts_per_tok;
  const int64_t b = w.moe_begin;
  const double t0 = NowSeconds();
  Status st = experts_->Start(slot, {.layer = l,
                                     .num_tokens = w.moe_count,
                                     .hidden = H,
                                     .top_k = K,
                                     .x = &w.xn[b * H],
                                     .expert_ids = &w.expert_ids[b * K],
                                     .weights = &w.weights[b * K],
                                     .token_keys = &w.token_key[b],
                                     .compute = compute_});
  times_.routed_experts += NowSeconds() - t0;
  return st;
}

void Model::SharedExpert(int l, Workspace& w) {
  const MoeWeights& m = *weights_.Layer(l).moe;
  const int H = config_.hidden_size;
  const double t0 = NowSeconds();
  w.shared_out.resize(w.T * H);
  if (!m.shared.empty())
    RunMlp(m.shared, &w.xn[w.moe_begin * H], w.moe_count, &w.shared_out[w.moe_begin * H], w.mlp,
           pool_, compute_);
  times_.shared_expert += NowSeconds() - t0;
}

Status Model::MoeReceive(int l, Workspace& w, int slot, bool run_shared) {
  const MoeWeights& m = *weights_.Layer(l).moe;
  const int H = config_.hidden_size;
  const int64_t b = w.moe_begin, n = w.moe_count;
  double t0 = NowSeconds();
  RETURN_IF_ERROR(experts_->Finish(slot, &w.ffn_out[b * H]));
  times_.routed_experts += NowSeconds() - t0;
  if (run_shared) SharedExpert(l, w);
  // out = (sum_k w_k y_k) + shared, in that order in every overlap mode.
  if (!m.shared.empty())
    for (int64_t i = b * H; i < (b + n) * H; ++i) w.ffn_out[i] += w.shared_out[i];
  if (tp_.size > 1) {
    t0 = NowSeconds();
    RETURN_IF_ERROR(tp_.group->AllReduceSum(w.ffn_out.data(), w.T * H));
    times_.tp_comm += NowSeconds() - t0;
  }
  for (int64_t i = 0; i < w.T * H; ++i) w.x[i] += w.ffn_out[i];
  return Status::Ok();
}

}  // namespace epserve
