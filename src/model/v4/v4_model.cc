#include "model/v4/v4_model.h"

#include <algorithm>
#include <cmath>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/v4/v4_matmul.h"

namespace epserve::v4 {

V4SequenceState::V4SequenceState(const V4Config& c) : config_(&c) { Reset(); }

void V4SequenceState::Reset() {
  const V4Config& c = *config_;
  num_tokens_ = 0;
  layers_.resize(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    V4LayerState& s = layers_[l];
    s.window.assign(c.window * c.head_dim, 0.0f);
    s.compressed.clear();
    s.index_keys.clear();
    const int r = c.Ratio(l);
    auto init = [&](V4CompressorState& cs, int64_t d) {
      const int64_t rows = (r == 4 ? 2 : 1) * int64_t{r};
      const int64_t width = V4Config::CompressFactor(r) * d;
      cs.kappa.assign(rows * width, 0.0f);
      cs.sigma.assign(rows * width, -INFINITY);
      cs.num_groups = 0;
    };
    if (r != 0) init(s.compressor, c.head_dim);
    if (r == 4) init(s.index_compressor, c.index_dim);
  }
}

V4Model::V4Model(const V4Weights& weights, ThreadPool& pool)
    : w_(weights),
      c_(weights.config()),
      pool_(pool),
      freqs_plain_(RopeFreqs(c_, false)),
      freqs_compressed_(RopeFreqs(c_, true)) {}

Status V4Model::Forward(std::span<const V4Chunk> chunks, float* logits, V4Logits which) {
  for (size_t i = 0; i < chunks.size(); ++i) {
    const V4Chunk& ch = chunks[i];
    if (ch.state == nullptr || ch.state->config_ != &c_ ||
        static_cast<int>(ch.state->layers_.size()) != c_.num_layers)
      return Status::InvalidArgument("V4 forward: chunk " + std::to_string(i) +
                                     " has no state of this model");
    if (ch.tokens.empty())
      return Status::InvalidArgument("V4 forward: chunk " + std::to_string(i) + " is empty");
    for (int32_t t : ch.tokens)
      if (t < 0 || t >= c_.vocab_size)
        return Status::InvalidArgument("V4 forward: token id " + std::to_string(t) +
                                       " out of range [0, " + std::to_string(c_.vocab_size) + ")");
    for (size_t j = 0; j < i; ++j)
      if (chunks[j].state == ch.state)
        return Status::InvalidArgument("V4 forward: two chunks share one sequence state");
  }
  float* out = logits;
  for (const V4Chunk& ch : chunks) {
    RunChunk(*ch.state, ch.tokens, out, which);
    out += (which == V4Logits::kAll ? static_cast<int64_t>(ch.tokens.size()) : 1) * c_.vocab_size;
  }
  return Status::Ok();
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

void V4Model::RunChunk(V4SequenceState& s, std::span<const int32_t> ids, float* logits,
                       V4Logits which) {
  const int64_t T = static_cast<int64_t>(ids.size()), D = c_.hidden_size;
  const int M = c_.hc_mult;
  const int64_t p0 = s.num_tokens_;
  std::vector<float> X(T * M * D), y(T * D), normed(T * D), o(T * D);
  for (int64_t t = 0; t < T; ++t) {
    kernels::DequantizeRow(w_.embed(), ids[t], 0, D, &X[t * M * D]);
    for (int k = 1; k < M; ++k) std::copy_n(&X[t * M * D], D, &X[t * M * D + k * D]);
  }
  std::vector<HcMix> mix;
  for (int l = 0; l < c_.num_layers; ++l) {
    const V4Layer& L = w_.layers()[l];
    HcPre(L.hc_attn, T, X.data(), y.data(), &mix);
    for (int64_t t = 0; t < T; ++t)
      kernels::RmsNorm(&y[t * D], L.attn_norm.data(), D, static_cast<float>(c_.rms_norm_eps),
                       &normed[t * D]);
    Attention(l, s.layers_[l], p0, T, normed.data(), o.data());
    HcPost(mix, T, M, D, o.data(), X.data());
    HcPre(L.hc_ffn, T, X.data(), y.data(), &mix);
    for (int64_t t = 0; t < T; ++t)
      kernels::RmsNorm(&y[t * D], L.ffn_norm.data(), D, static_cast<float>(c_.rms_norm_eps),
                       &normed[t * D]);
    Moe(l, T, ids.data(), normed.data(), o.data());
    HcPost(mix, T, M, D, o.data(), X.data());
  }
  s.num_tokens_ += T;
  // The head: HC head, final norm, logits.
  const int64_t first = which == V4Logits::kAll ? 0 : T - 1;
  const int64_t n = T - first;
  HcPre(w_.hc_head(), n, &X[first * M * D], y.data(), &mix);
  for (int64_t t = 0; t < n; ++t)
    kernels::RmsNorm(&y[t * D], w_.norm().data(), D, static_cast<float>(c_.rms_norm_eps),
                     &normed[t * D]);
  Project(normed.data(), n, w_.head(), logits, pool_);
}

void V4Model::Moe(int l, int64_t T, const int32_t* ids, const float* x, float* out) {
  const V4Layer& L = w_.layers()[l];
  const int64_t D = c_.hidden_size, F = c_.moe_inter;
  const int E = c_.num_experts, k = c_.experts_per_token;
  std::vector<float> z(T * E);
  Project(x, T, L.gate, z.data(), pool_);
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
  const float lim = static_cast<float>(c_.swiglu_limit);
  // SwiGLU of rows xs [n, D] through expert ex, each row's intermediate times rw[r] (or 1).
  std::vector<float> xs, a, b, ys;
  auto swiglu = [&](const V4Expert& ex, int64_t n, const float* rw) {
    a.resize(n * F);
    b.resize(n * F);
    ys.resize(n * D);
    Project(xs.data(), n, ex.w1, a.data(), pool_);
    Project(xs.data(), n, ex.w3, b.data(), pool_);
    for (int64_t i = 0; i < n * F; ++i) {
      float av = a[i], bv = b[i];
      if (lim > 0) {
        bv = std::clamp(bv, -lim, lim);
        av = std::min(av, lim);
      }
      a[i] = av / (1.0f + std::exp(-av)) * bv * (rw ? rw[i / F] : 1.0f);
    }
    Project(a.data(), n, ex.w2, ys.data(), pool_);
  };
  std::vector<double> acc(T * D, 0.0);
  std::vector<int64_t> rows;
  std::vector<float> rw;
  for (int e = 0; e < E; ++e) {
    rows.clear();
    rw.clear();
    for (int64_t t = 0; t < T; ++t)
      for (int i = 0; i < k; ++i)
        if (idx[t * k + i] == e) {
          rows.push_back(t);
          rw.push_back(wt[t * k + i]);
        }
    if (rows.empty()) continue;
    const int64_t n = static_cast<int64_t>(rows.size());
    xs.resize(n * D);
    for (int64_t r = 0; r < n; ++r) std::copy_n(x + rows[r] * D, D, &xs[r * D]);
    swiglu(L.experts[e], n, rw.data());
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < D; ++i) acc[rows[r] * D + i] += ys[r * D + i];
  }
  xs.assign(x, x + T * D);
  swiglu(L.shared, T, nullptr);
  for (int64_t i = 0; i < T * D; ++i) out[i] = static_cast<float>(acc[i] + ys[i]);
}

}  // namespace epserve::v4
