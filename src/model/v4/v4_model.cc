#include "model/v4/v4_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/v4/v4_matmul.h"
#include "model/v4/v4_step.h"
#include "placement/token_key.h"

namespace epserve::v4 {

namespace {

// X[t, k] <- post_k o[t] + sum_j comb[j, k] X[t, j].
void HcPost(const std::vector<HcMix>& mix, int64_t T, int M, int64_t D, const float* o, float* X) {
  std::vector<double> nx(M * D);
  for (int64_t t = 0; t < T; ++t) {
    float* x = X + t * M * D;
    const HcMix& hm = mix[t];
    for (int k = 0; k < M; ++k)
      for (int64_t i = 0; i < D; ++i) {
        double acc = hm.post[k] * o[t * D + i];
        for (int j = 0; j < M; ++j) acc += hm.comb[j * M + k] * x[j * D + i];
        nx[k * D + i] = acc;
      }
    for (int64_t i = 0; i < M * D; ++i) x[i] = static_cast<float>(nx[i]);
  }
}

}  // namespace

V4CacheRow V4CacheRow::Of(const V4Config& c, int ratio, int64_t base) {
  V4CacheRow r;
  int64_t at = base;
  auto take = [&](int64_t* field, int64_t n) {
    *field = at;
    at += n;
  };
  take(&r.kv, c.head_dim);
  if (ratio != 0) {
    const int64_t cd = V4Config::CompressFactor(ratio) * c.head_dim;
    take(&r.kappa, cd);
    take(&r.sigma, cd);
    take(&r.entry, c.head_dim);
  }
  if (ratio == 4) {
    take(&r.ikappa, 2 * c.index_dim);
    take(&r.isigma, 2 * c.index_dim);
    take(&r.ikey, c.index_dim);
  }
  r.width = at - base;
  return r;
}

int V4CacheRowWidth(const V4Config& c) {
  int64_t w = 0;
  for (int l = 0; l < c.num_layers; ++l) w += V4CacheRow::Of(c, c.Ratio(l), 0).width;
  return static_cast<int>(w);
}

V4Model::V4Model(const V4Weights& weights, ThreadPool& pool)
    : w_(weights),
      c_(weights.config()),
      pool_(pool),
      freqs_plain_(RopeFreqs(c_, false)),
      freqs_compressed_(RopeFreqs(c_, true)),
      row_width_(V4CacheRowWidth(c_)),
      local_experts_(std::make_unique<LocalExperts>(weights, pool)),
      experts_(local_experts_.get()) {
  int64_t base = 0;
  for (int l = 0; l < c_.num_layers; ++l) {
    rows_.push_back(V4CacheRow::Of(c_, c_.Ratio(l), base));
    base += rows_.back().width;
  }
}

void V4Model::SetExpertInput(ExpertInputFormat format) {
  const bool local = experts_ == local_experts_.get();
  local_experts_ = std::make_unique<LocalExperts>(w_, pool_, format, c_.ue8m0_scales);
  if (local) experts_ = local_experts_.get();
}

std::string V4Model::Describe() const {
  return "DeepSeek-V4 (" + std::to_string(c_.num_layers) + " layers, hidden " +
         std::to_string(c_.hidden_size) + ", " + std::to_string(c_.num_experts) +
         " routed experts, window " + std::to_string(c_.window) + ")";
}

Status V4Model::CheckEngineOptions(KvDType kv_dtype, bool mtp, const OverlapOptions& overlap,
                                   kernels::Compute compute) const {
  if (kv_dtype != KvDType::kF32)
    return Status::InvalidArgument(
        std::string("--kv-dtype ") + KvDTypeName(kv_dtype) +
        ": DeepSeek-V4's cache rows hold compressor state and are float32 only (--kv-dtype f32)");
  if (mtp) return Status::InvalidArgument("--mtp on: DeepSeek-V4's MTP module is not run yet");
  if (overlap.mode == Overlap::kMicroBatch)
    return Status::InvalidArgument(
        "--overlap microbatch: not implemented for DeepSeek-V4 (use none or dispatch)");
  if (compute != kernels::Compute::kExact)
    return Status::InvalidArgument("--compute fast: not implemented for DeepSeek-V4");
  return Status::Ok();
}

KvLayout V4Model::CacheLayout(KvDType, bool) const {
  return {.num_layers = 1, .row_width = row_width_, .index_bytes = 0};
}

Status V4Model::ForwardMtp(const ForwardBatch&, std::span<const int64_t>, const KvBlocks&, float*) {
  return Status::InvalidArgument("DeepSeek-V4's MTP module is not run yet");
}

Status V4Model::Forward(const ForwardBatch& batch, const KvBlocks& kv, float* logits) {
  non_finite_.clear();
  RETURN_IF_ERROR(CheckBatchShape(batch, kv, vocab_size()));
  if (kv.dtype != KvDType::kF32 || kv.num_layers != 1 || kv.row_width != row_width_ ||
      kv.index_bytes != 0)
    return Status::InvalidArgument("KV cache of " + std::to_string(kv.num_layers) + " layers x " +
                                   std::to_string(kv.row_width) + " " + KvDTypeName(kv.dtype) +
                                   " does not fit this DeepSeek-V4 model (one record of " +
                                   std::to_string(row_width_) + " f32 per position)");
  const Step s(batch, kv);
  const int64_t T = s.T, D = c_.hidden_size;
  const int M = c_.hc_mult;
  chunk_bad_.assign(batch.chunks.size(), 0);
  if (T == 0) {
    // Under expert parallelism every rank joins every layer's expert exchange each step, with
    // zero rows when its group has nothing to run (ExpertBackend; as Model::Forward does).
    float none = 0;
    for (int l = 0; l < c_.num_layers; ++l) RETURN_IF_ERROR(Moe(l, s, &none, &none));
    return Status::Ok();
  }
  std::vector<float> X(T * M * D), y(T * D), normed(T * D), o(T * D);
  for (int64_t t = 0; t < T; ++t) {
    kernels::DequantizeRow(w_.embed(), s.ids[t], 0, D, &X[t * M * D]);
    for (int k = 1; k < M; ++k) std::copy_n(&X[t * M * D], D, &X[t * M * D + k * D]);
  }
  CheckFinite(-1, s, X.data());
  std::vector<HcMix> mix;
  for (int l = 0; l < c_.num_layers; ++l) {
    const V4Layer& L = w_.layers()[l];
    HcPre(L.hc_attn, T, X.data(), y.data(), &mix);
    for (int64_t t = 0; t < T; ++t)
      kernels::RmsNorm(&y[t * D], L.attn_norm.data(), D, static_cast<float>(c_.rms_norm_eps),
                       &normed[t * D]);
    Attention(l, s, normed.data(), o.data());
    HcPost(mix, T, M, D, o.data(), X.data());
    HcPre(L.hc_ffn, T, X.data(), y.data(), &mix);
    for (int64_t t = 0; t < T; ++t)
      kernels::RmsNorm(&y[t * D], L.ffn_norm.data(), D, static_cast<float>(c_.rms_norm_eps),
                       &normed[t * D]);
    RETURN_IF_ERROR(Moe(l, s, normed.data(), o.data()));
    HcPost(mix, T, M, D, o.data(), X.data());
    CheckFinite(l, s, X.data());
  }
  // The head over the rows that give logits: HC head, final norm, logits.
  std::vector<float> rows;
  int64_t n = 0;
  for (size_t i = 0; i < batch.chunks.size(); ++i) {
    const SequenceChunk& ch = batch.chunks[i];
    if (!ch.want_logits) continue;
    const int64_t last = s.first_token[i] + static_cast<int64_t>(ch.tokens.size());
    for (int64_t t = last - ch.num_logits; t < last; ++t, ++n)
      rows.insert(rows.end(), &X[t * M * D], &X[(t + 1) * M * D]);
  }
  if (n == 0) return Status::Ok();
  HcPre(w_.hc_head(), n, rows.data(), y.data(), &mix);
  for (int64_t t = 0; t < n; ++t)
    kernels::RmsNorm(&y[t * D], w_.norm().data(), D, static_cast<float>(c_.rms_norm_eps),
                     &normed[t * D]);
  Project(normed.data(), n, w_.head(), logits, pool_);
  return Status::Ok();
}

void V4Model::CheckFinite(int l, const Step& s, const float* X) {
  const int64_t width = c_.hc_mult * c_.hidden_size;
  for (int64_t t = 0; t < s.T; ++t) {
    if (chunk_bad_[s.chunk[t]]) continue;
    for (int64_t i = 0; i < width; ++i) {
      const float v = X[t * width + i];
      if (std::isfinite(v)) continue;
      chunk_bad_[s.chunk[t]] = 1;
      non_finite_.push_back({.chunk = static_cast<size_t>(s.chunk[t]),
                             .layer = l,
                             .part = l < 0 ? "embedding" : "layer",
                             .position = s.pos[t],
                             .nan = std::isnan(v)});
      break;
    }
  }
}

void V4Model::HcPre(const V4Hc& hc, int64_t T, const float* X, float* y, std::vector<HcMix>* mix) {
  const int M = c_.hc_mult;
  const int64_t D = c_.hidden_size, MD = M * D, mixw = hc.fn.rows;
  std::vector<float> m(T * mixw);
  Project(X, T, hc.fn, m.data(), pool_);
  mix->resize(T);
  for (int64_t t = 0; t < T; ++t) {
    const float* x = X + t * MD;
    double ss = 0;
    for (int64_t i = 0; i < MD; ++i) ss += double{x[i]} * x[i];
    const float rho = static_cast<float>(1.0 / std::sqrt(ss / MD + c_.rms_norm_eps));
    for (int64_t i = 0; i < mixw; ++i) m[t * mixw + i] *= rho;
    HcMix& hm = (*mix)[t];
    if (mixw == M) {  // the head: pre only
      hm.pre.resize(M);
      for (int k = 0; k < M; ++k)
        hm.pre[k] = 1.0 / (1.0 + std::exp(-(double{hc.scale[0]} * m[t * mixw + k] + hc.base[k]))) +
                    c_.hc_eps;
    } else {
      Sinkhorn(&m[t * mixw], hc.scale.data(), hc.base.data(), M, c_.hc_sinkhorn_iters, c_.hc_eps,
               &hm);
    }
    for (int64_t i = 0; i < D; ++i) {
      double acc = 0;
      for (int k = 0; k < M; ++k) acc += hm.pre[k] * x[k * D + i];
      y[t * D + i] = static_cast<float>(acc);
    }
  }
}

Status V4Model::Moe(int l, const Step& s, const float* x, float* out) {
  const int64_t T = s.T;
  const int32_t* ids = s.ids.data();
  const V4Layer& L = w_.layers()[l];
  const int64_t D = c_.hidden_size;
  const int E = c_.num_experts, k = c_.experts_per_token;
  std::vector<float> z(T * E);
  if (T > 0) Project(x, T, L.gate, z.data(), pool_);
  // Per token: chosen experts and weights.
  std::vector<int32_t> idx(T * k);
  std::vector<float> wt(T * k);
  std::vector<double> g(E);
  std::vector<int32_t> order(E);
  for (int64_t t = 0; t < T; ++t) {
    for (int e = 0; e < E; ++e) {
      const double v = z[t * E + e];
      g[e] = std::sqrt(v > 20 ? v : std::log1p(std::exp(v)));
    }
    if (l < c_.num_hash_layers) {
      std::copy_n(&L.tid2eid[int64_t{ids[t]} * k], k, &idx[t * k]);
    } else {
      for (int e = 0; e < E; ++e) order[e] = e;
      auto key = [&](int e) { return g[e] + L.gate_bias[e]; };
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
        return key(a) > key(b) || (key(a) == key(b) && a < b);
      });
      std::copy_n(order.begin(), k, &idx[t * k]);
    }
    double sum = 0;
    for (int i = 0; i < k; ++i) sum += g[idx[t * k + i]];
    for (int i = 0; i < k; ++i)
      wt[t * k + i] = static_cast<float>(g[idx[t * k + i]] / sum * c_.route_scale);
  }
  // Routed experts through the expert backend (this process's, or the expert-parallel world's),
  // then + the shared expert: the order of V3's MoE (each routed output weighted after its w2;
  // DeepSeek weights the intermediate before w2, the same product up to rounding).
  std::vector<uint64_t> keys(T);
  for (int64_t t = 0; t < T; ++t)
    keys[t] = placement::TokenKey(s.batch.chunks[s.chunk[t]].sequence_id,
                                  static_cast<uint32_t>(s.pos[t]));
  // With TP this rank's experts take its contiguous share [b, b + n) of the tokens (every TP
  // rank has computed every token's attention and routing alike); the group sums the outputs.
  const int64_t b = T * tp_.rank / tp_.size, n = T * (tp_.rank + 1) / tp_.size - b;
  const RoutedBatch routed{.layer = l,
                           .num_tokens = n,
                           .hidden = static_cast<int>(D),
                           .top_k = k,
                           .x = x + b * D,
                           .expert_ids = idx.data() + b * k,
                           .weights = wt.data() + b * k,
                           .token_keys = keys.data() + b};
  RETURN_IF_ERROR(experts_->Start(0, routed));
  RETURN_IF_ERROR(experts_->Compute(0));
  shared_out_.resize(T * D);
  RunMlp(L.shared, x + b * D, n, shared_out_.data() + b * D, mlp_scratch_, pool_);
  std::fill_n(out, T * D, 0.0f);
  RETURN_IF_ERROR(experts_->Finish(0, out + b * D));
  for (int64_t i = b * D; i < (b + n) * D; ++i) out[i] += shared_out_[i];
  // Every rank of a group runs the same plan, so all skip the sum of an empty step alike.
  if (tp_.size > 1 && T > 0) RETURN_IF_ERROR(tp_.group->AllReduceSum(out, T * D));
  return Status::Ok();
}

}  // namespace epserve::v4
