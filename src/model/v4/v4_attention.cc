// V4's attention sublayer (docs/v4-model.md §5): query and the shared K = V entry, the window
// ring, the compressors' entries, the indexer's choice (ratio 4), attention with a sink, inverse
// RoPE and the grouped low-rank output.
#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "kernels/sparse_index.h"
#include "model/v4/v4_matmul.h"
#include "model/v4/v4_model.h"

namespace epserve::v4 {

void V4Model::Compress(const V4Compressor& w, int ratio, int64_t d, bool indexer,
                       V4CompressorState& cs, int64_t p0, int64_t T, const float* a,
                       std::vector<float>& entries) {
  const int64_t cd = V4Config::CompressFactor(ratio) * d, R = c_.rope_dim;
  std::vector<float> kap(T * cd), sig(T * cd);
  Project(a, T, w.wkv, kap.data(), pool_);
  Project(a, T, w.wgate, sig.data(), pool_);
  // Ratio 4 keeps 2r rows (previous group, group in progress), others r.
  const int64_t base = ratio == 4 ? ratio : 0, num_rows = base + ratio;
  std::vector<int64_t> offsets(num_rows, 0);
  if (ratio == 4)
    for (int64_t r = ratio; r < num_rows; ++r) offsets[r] = d;
  std::vector<float> entry(d);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t pos = p0 + t, slot = base + pos % ratio;
    const float* ape = &w.ape[(pos % ratio) * cd];
    for (int64_t j = 0; j < cd; ++j) {
      cs.kappa[slot * cd + j] = kap[t * cd + j];
      cs.sigma[slot * cd + j] = sig[t * cd + j] + ape[j];
    }
    if ((pos + 1) % ratio != 0) continue;
    // Group pos / ratio is complete: one entry (the previous group's rows start with sigma
    // -inf at sequence start, weight 0).
    PoolGroup({.kappa = cs.kappa.data(),
               .sigma = cs.sigma.data(),
               .stride = cd,
               .offsets = offsets.data(),
               .num_rows = num_rows},
              d, entry.data());
    kernels::RmsNorm(entry.data(), w.norm.data(), d, static_cast<float>(c_.rms_norm_eps),
                     entry.data());
    const int64_t group = pos / ratio;
    RotateInterleaved(entry.data() + d - R, freqs_compressed_.data(), R / 2, group * ratio,
                      RopeDirection::kForward);
    if (indexer) {
      kernels::HadamardRotate(entry.data(), static_cast<int>(d));
      Q4Block(entry.data(), d);
    } else {
      Q8Block(entry.data(), d - R, 64);
    }
    entries.insert(entries.end(), entry.begin(), entry.end());
    ++cs.num_groups;
    if (ratio == 4)
      for (int64_t r = 0; r < ratio; ++r) {
        std::copy_n(&cs.kappa[(ratio + r) * cd], cd, &cs.kappa[r * cd]);
        std::copy_n(&cs.sigma[(ratio + r) * cd], cd, &cs.sigma[r * cd]);
      }
  }
}

void V4Model::IndexSelect(const V4LayerState& st, const float* iq, const float* iw, int64_t n,
                          std::vector<int32_t>* chosen) const {
  const int64_t Di = c_.index_dim;
  const int Hi = c_.index_heads;
  std::vector<double> score(n);
  for (int64_t i = 0; i < n; ++i) {
    const float* key = &st.index_keys[i * Di];
    double s = 0;
    for (int h = 0; h < Hi; ++h) {
      double dot = 0;
      for (int64_t j = 0; j < Di; ++j) dot += double{iq[h * Di + j]} * key[j];
      s += double{iw[h]} * std::max(dot, 0.0);
    }
    score[i] = s;
  }
  const int64_t k = std::min<int64_t>(c_.index_topk, n);
  chosen->resize(n);
  for (int64_t i = 0; i < n; ++i) (*chosen)[i] = static_cast<int32_t>(i);
  // Largest first; equal scores lower entry first (as the reference).
  std::partial_sort(chosen->begin(), chosen->begin() + k, chosen->end(), [&](int32_t x, int32_t y) {
    return score[x] > score[y] || (score[x] == score[y] && x < y);
  });
  chosen->resize(k);
}

void V4Model::Attention(int l, V4LayerState& st, int64_t p0, int64_t T, const float* a,
                        float* out) {
  const V4Layer& L = w_.layers()[l];
  const int H = c_.num_heads, Hi = c_.index_heads, W = c_.window, ratio = L.ratio;
  const int64_t D = c_.hidden_size, Dh = c_.head_dim, R = c_.rope_dim, Q = c_.q_lora_rank;
  const int64_t Di = c_.index_dim, HD = c_.QWidth();
  const float eps = static_cast<float>(c_.rms_norm_eps);
  const std::vector<double>& freqs = ratio != 0 ? freqs_compressed_ : freqs_plain_;

  std::vector<float> qlat(T * Q), q(T * HD), kv(T * Dh);
  Project(a, T, L.wq_a, qlat.data(), pool_);
  for (int64_t t = 0; t < T; ++t)
    kernels::RmsNorm(&qlat[t * Q], L.q_norm.data(), Q, eps, &qlat[t * Q]);
  Project(qlat.data(), T, L.wq_b, q.data(), pool_);
  for (int64_t t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      float* qh = &q[t * HD + h * Dh];
      double ss = 0;
      for (int64_t i = 0; i < Dh; ++i) ss += double{qh[i]} * qh[i];
      const double inv = 1.0 / std::sqrt(ss / Dh + c_.rms_norm_eps);
      for (int64_t i = 0; i < Dh; ++i) qh[i] = static_cast<float>(qh[i] * inv);
      RotateInterleaved(qh + Dh - R, freqs.data(), R / 2, p0 + t, RopeDirection::kForward);
    }
  Project(a, T, L.wkv, kv.data(), pool_);
  for (int64_t t = 0; t < T; ++t) {
    float* e = &kv[t * Dh];
    kernels::RmsNorm(e, L.kv_norm.data(), Dh, eps, e);
    RotateInterleaved(e + Dh - R, freqs.data(), R / 2, p0 + t, RopeDirection::kForward);
    Q8Block(e, Dh - R, 64);
  }
  if (ratio != 0) Compress(L.compressor, ratio, Dh, false, st.compressor, p0, T, a, st.compressed);
  std::vector<float> iq, iw;
  if (ratio == 4) {
    iq.resize(T * Hi * Di);
    iw.resize(T * Hi);
    Project(qlat.data(), T, L.index_wq_b, iq.data(), pool_);
    for (int64_t t = 0; t < T; ++t)
      for (int h = 0; h < Hi; ++h) {
        float* qh = &iq[(t * Hi + h) * Di];
        RotateInterleaved(qh + Di - R, freqs_compressed_.data(), R / 2, p0 + t,
                          RopeDirection::kForward);
        kernels::HadamardRotate(qh, static_cast<int>(Di));
        Q4Block(qh, Di);
      }
    Project(a, T, L.index_weights_proj, iw.data(), pool_);
    const float wscale = static_cast<float>(1.0 / std::sqrt(double(Di) * Hi));
    for (float& v : iw) v *= wscale;
    Compress(L.index_compressor, 4, Di, true, st.index_compressor, p0, T, a, st.index_keys);
  }

  // Window entries of positions [start, p0 + T): the ring's, then this chunk's.
  const int64_t start = std::max<int64_t>(0, p0 - W + 1), num_old = p0 - start;
  std::vector<float> win((num_old + T) * Dh);
  for (int64_t p = start; p < p0; ++p)
    std::copy_n(&st.window[(p % W) * Dh], Dh, &win[(p - start) * Dh]);
  std::copy_n(kv.data(), T * Dh, &win[num_old * Dh]);
  for (int64_t t = std::max<int64_t>(0, T - W); t < T; ++t)
    std::copy_n(&kv[t * Dh], Dh, &st.window[((p0 + t) % W) * Dh]);

  std::vector<float> o(T * HD);
  const double scale = 1.0 / std::sqrt(static_cast<double>(Dh));
  pool_.ParallelFor(T, 1, [&](size_t begin, size_t end, int) {
    std::vector<const float*> ents;
    std::vector<int32_t> chosen;
    std::vector<double> sc, acc(Dh);
    for (size_t t = begin; t < end; ++t) {
      const int64_t pos = p0 + static_cast<int64_t>(t);
      ents.clear();
      for (int64_t p = std::max<int64_t>(0, pos - W + 1); p <= pos; ++p)
        ents.push_back(&win[(p - start) * Dh]);
      if (ratio != 0) {
        const int64_t n = (pos + 1) / ratio;
        if (ratio == 4) {
          IndexSelect(st, &iq[t * Hi * Di], &iw[t * Hi], n, &chosen);
          for (int32_t i : chosen) ents.push_back(&st.compressed[i * Dh]);
        } else {
          for (int64_t i = 0; i < n; ++i) ents.push_back(&st.compressed[i * Dh]);
        }
      }
      sc.resize(ents.size());
      for (int h = 0; h < H; ++h) {
        const float* qh = &q[t * HD + h * Dh];
        const double sink = L.attn_sink[h];
        double mx = sink;
        for (size_t e = 0; e < ents.size(); ++e) {
          double dot = 0;
          for (int64_t i = 0; i < Dh; ++i) dot += double{qh[i]} * ents[e][i];
          sc[e] = dot * scale;
          mx = std::max(mx, sc[e]);
        }
        double den = std::exp(sink - mx);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (size_t e = 0; e < ents.size(); ++e) {
          const double p = std::exp(sc[e] - mx);
          den += p;
          for (int64_t i = 0; i < Dh; ++i) acc[i] += p * ents[e][i];
        }
        float* oh = &o[t * HD + h * Dh];
        for (int64_t i = 0; i < Dh; ++i) oh[i] = static_cast<float>(acc[i] / den);
        RotateInterleaved(oh + Dh - R, freqs.data(), R / 2, pos, RopeDirection::kInverse);
      }
    }
  });

  const int G = c_.o_groups;
  const int64_t Ro = c_.o_lora_rank;
  std::vector<float> z(T * G * Ro);
  for (int g = 0; g < G; ++g)
    Project(&o[g * c_.OGroupIn()], T, L.wo_a.RowSlice(g * Ro, Ro), &z[g * Ro], pool_, HD, G * Ro);
  Project(z.data(), T, L.wo_b, out, pool_);
  (void)D;
}

}  // namespace epserve::v4
