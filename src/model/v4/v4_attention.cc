// V4's attention sublayer (docs/v4-model.md §5): query and the shared K = V entry, the window
// ring, the compressors' entries, the indexer's choice (ratio 4), attention with a sink, inverse
// RoPE and the grouped low-rank output.
#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "kernels/sparse_index.h"
#include "model/v4/v4_matmul.h"
#include "model/v4/v4_model.h"
#include "model/v4/v4_step.h"

namespace epserve::v4 {

void V4Model::Compress(const V4Compressor& w, int l, int ratio, bool indexer, const Step& s,
                       const float* a) {
  const int64_t d = indexer ? c_.index_dim : c_.head_dim;
  const int64_t cd = V4Config::CompressFactor(ratio) * d, R = c_.rope_dim, T = s.T;
  const V4CacheRow& row = rows_[l];
  const int64_t at_kappa = indexer ? row.ikappa : row.kappa;
  const int64_t at_sigma = indexer ? row.isigma : row.sigma;
  const int64_t at_entry = indexer ? row.ikey : row.entry;
  std::vector<float> kap(T * cd), sig(T * cd);
  Project(a, T, w.wkv, kap.data(), pool_);
  Project(a, T, w.wgate, sig.data(), pool_);
  for (int64_t t = 0; t < T; ++t) {
    float* r = s.Row(t);
    const float* ape = &w.ape[(s.pos[t] % ratio) * cd];
    for (int64_t j = 0; j < cd; ++j) {
      r[at_kappa + j] = kap[t * cd + j];
      r[at_sigma + j] = sig[t * cd + j] + ape[j];
    }
  }
  // Each group completing in this step pools its positions' rows (ratio 4: the previous
  // group's too; before the first group they are candidates of weight 0, sigma -inf), the same
  // candidates in the same order as DeepSeek's kv_state / score_state slots.
  const int64_t base = ratio == 4 ? ratio : 0, num_rows = base + ratio;
  std::vector<int64_t> offsets(num_rows, 0);
  if (ratio == 4)
    for (int64_t r = ratio; r < num_rows; ++r) offsets[r] = d;
  std::vector<float> kappa(num_rows * cd), sigma(num_rows * cd), entry(d);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t pos = s.pos[t];
    if ((pos + 1) % ratio != 0) continue;
    const int64_t group = pos / ratio;
    for (int64_t r = 0; r < num_rows; ++r) {
      const int64_t p = (group - (ratio == 4 ? 1 : 0)) * ratio + r;
      if (p < 0) {
        std::fill_n(&kappa[r * cd], cd, 0.0f);
        std::fill_n(&sigma[r * cd], cd, -INFINITY);
        continue;
      }
      const float* src = s.RowAt(s.chunk[t], p);
      std::copy_n(src + at_kappa, cd, &kappa[r * cd]);
      std::copy_n(src + at_sigma, cd, &sigma[r * cd]);
    }
    PoolGroup({.kappa = kappa.data(),
               .sigma = sigma.data(),
               .stride = cd,
               .offsets = offsets.data(),
               .num_rows = num_rows},
              d, entry.data());
    kernels::RmsNorm(entry.data(), w.norm.data(), d, static_cast<float>(c_.rms_norm_eps),
                     entry.data());
    RotateInterleaved(entry.data() + d - R, freqs_compressed_.data(), R / 2, group * ratio,
                      RopeDirection::kForward);
    if (indexer) {
      kernels::HadamardRotate(entry.data(), static_cast<int>(d));
      Q4Block(entry.data(), d);
    } else {
      Q8Block(entry.data(), d - R, 64);
    }
    std::copy_n(entry.data(), d, s.Row(t) + at_entry);
  }
}

void V4Model::IndexSelect(int l, const Step& s, int64_t token, const float* iq, const float* iw,
                          int64_t n, std::vector<int32_t>* chosen) const {
  const int64_t Di = c_.index_dim;
  const int Hi = c_.index_heads;
  std::vector<double> score(n);
  for (int64_t i = 0; i < n; ++i) {
    const float* key = s.RowAt(s.chunk[token], (i + 1) * 4 - 1) + rows_[l].ikey;
    double sc = 0;
    for (int h = 0; h < Hi; ++h) {
      double dot = 0;
      for (int64_t j = 0; j < Di; ++j) dot += double{iq[h * Di + j]} * key[j];
      sc += double{iw[h]} * std::max(dot, 0.0);
    }
    score[i] = sc;
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

void V4Model::Attention(int l, const Step& s, const float* a, float* out) {
  const V4Layer& L = w_.layers()[l];
  const int H = c_.num_heads, Hi = c_.index_heads, W = c_.window, ratio = L.ratio;
  const int64_t D = c_.hidden_size, Dh = c_.head_dim, R = c_.rope_dim, Q = c_.q_lora_rank;
  const int64_t Di = c_.index_dim, HD = c_.QWidth();
  const float eps = static_cast<float>(c_.rms_norm_eps);
  const int64_t T = s.T, at_kv = rows_[l].kv, at_entry = rows_[l].entry;
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
      RotateInterleaved(qh + Dh - R, freqs.data(), R / 2, s.pos[t], RopeDirection::kForward);
    }
  Project(a, T, L.wkv, kv.data(), pool_);
  for (int64_t t = 0; t < T; ++t) {
    float* e = &kv[t * Dh];
    kernels::RmsNorm(e, L.kv_norm.data(), Dh, eps, e);
    RotateInterleaved(e + Dh - R, freqs.data(), R / 2, s.pos[t], RopeDirection::kForward);
    Q8Block(e, Dh - R, 64);
    std::copy_n(e, Dh, s.Row(t) + at_kv);
  }
  if (ratio != 0) Compress(L.compressor, l, ratio, false, s, a);
  std::vector<float> iq, iw;
  if (ratio == 4) {
    iq.resize(T * Hi * Di);
    iw.resize(T * Hi);
    Project(qlat.data(), T, L.index_wq_b, iq.data(), pool_);
    for (int64_t t = 0; t < T; ++t)
      for (int h = 0; h < Hi; ++h) {
        float* qh = &iq[(t * Hi + h) * Di];
        RotateInterleaved(qh + Di - R, freqs_compressed_.data(), R / 2, s.pos[t],
                          RopeDirection::kForward);
        kernels::HadamardRotate(qh, static_cast<int>(Di));
        Q4Block(qh, Di);
      }
    Project(a, T, L.index_weights_proj, iw.data(), pool_);
    const float wscale = static_cast<float>(1.0 / std::sqrt(double(Di) * Hi));
    for (float& v : iw) v *= wscale;
    Compress(L.index_compressor, l, 4, true, s, a);
  }

  std::vector<float> o(T * HD);
  const double scale = 1.0 / std::sqrt(static_cast<double>(Dh));
  pool_.ParallelFor(T, 1, [&](size_t begin, size_t end, int) {
    std::vector<const float*> ents;
    std::vector<int32_t> chosen;
    std::vector<double> sc, acc(Dh);
    for (size_t t = begin; t < end; ++t) {
      const int64_t pos = s.pos[t];
      const int32_t seq = s.chunk[t];
      ents.clear();
      for (int64_t p = std::max<int64_t>(0, pos - W + 1); p <= pos; ++p)
        ents.push_back(s.RowAt(seq, p) + at_kv);
      if (ratio != 0) {
        const int64_t n = (pos + 1) / ratio;
        if (ratio == 4) {
          IndexSelect(l, s, static_cast<int64_t>(t), &iq[t * Hi * Di], &iw[t * Hi], n, &chosen);
          for (int32_t i : chosen) ents.push_back(s.RowAt(seq, (i + 1) * ratio - 1) + at_entry);
        } else {
          for (int64_t i = 0; i < n; ++i)
            ents.push_back(s.RowAt(seq, (i + 1) * ratio - 1) + at_entry);
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
