// Vectorized absorbed MLA attention. Heads of one token that land in the same thread chunk are
// processed together (up to kMaxGroup), so each latent cache row is read once per group rather
// than once per head; the softmax is computed online over tiles of kTileS positions, so no
// per-position scratch is needed. The arithmetic of each head does not depend on the group it
// was processed in: results are bit-identical for any thread count.
#include "kernels/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"
#include "tensor/dtype.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/mla_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// (foreach_target.h re-includes this file once per target; what follows comes after it.)
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/simd-inl.h"

#ifndef EPSERVE_KERNELS_MLA_TILE_ROWS_
#define EPSERVE_KERNELS_MLA_TILE_ROWS_
namespace epserve::kernels {
// Rows of the widest tile any compiled target uses (its kTileS): the bf16 scratch is sized by it.
constexpr int64_t kMaxTileRows = 64;
}  // namespace epserve::kernels
#endif

HWY_BEFORE_NAMESPACE();
namespace epserve::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int kMaxGroup = 8;
// Positions per online-softmax step: a multiple of the vector length.
constexpr int64_t kTileS = std::max<int64_t>(16, HWY_MAX_BYTES / sizeof(float));
static_assert(kTileS <= kMaxTileRows, "MlaScratchFloats covers at most kMaxTileRows rows");

// Scores of kP cache rows (kP = 1 or 2) for kG heads: s[p][g] = qa[g] . rows[p][0:L] +
// qp[g] . rows[p][L:L+R]. Latent and rotary vector parts share one accumulator per (row, head),
// reduced once; the scalar tails are added after. Two rows at a time reuse each query load.
template <int kG, int kP, class DF>
HWY_INLINE void ScoreRows(DF df, const float* const* qa, const float* const* qp, const float* const* rows,
                          int64_t L, int64_t R, float (*s)[kMaxGroup]) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  hn::Vec<DF> acc[kP][kG];
  HWY_UNROLL(2)
  for (int p = 0; p < kP; ++p) {
    HWY_UNROLL(8)
    for (int g = 0; g < kG; ++g) acc[p][g] = hn::Zero(df);
  }
  auto part = [&](const float* const* q, int64_t offset, int64_t n) HWY_ATTR {
    int64_t i = 0;
    for (; i + N <= n; i += N) {
      hn::Vec<DF> c[kP];
      HWY_UNROLL(2)
      for (int p = 0; p < kP; ++p) c[p] = hn::LoadU(df, rows[p] + offset + i);
      HWY_UNROLL(8)
      for (int g = 0; g < kG; ++g) {
        const auto qv = hn::LoadU(df, q[g] + i);
        HWY_UNROLL(2)
        for (int p = 0; p < kP; ++p) acc[p][g] = hn::MulAdd(qv, c[p], acc[p][g]);
      }
    }
    return i;
  };
  const int64_t la = part(qa, 0, L), lr = part(qp, L, R);
  HWY_UNROLL(2)
  for (int p = 0; p < kP; ++p) {
    HWY_UNROLL(8)
    for (int g = 0; g < kG; ++g) {
      float v = hn::GetLane(hn::SumOfLanes(df, acc[p][g]));
      for (int64_t i = la; i < L; ++i) v += qa[g][i] * rows[p][i];
      for (int64_t i = lr; i < R; ++i) v += qp[g][i] * rows[p][L + i];
      s[p][g] = v;
    }
  }
}

// o[g] = o[g] * corr[g] + sum_j p[g][j] * rows[j] over L values, for kG heads; two vectors of
// L per step, so each broadcast weight feeds two FMAs.
template <int kG, class DF>
HWY_INLINE void UpdateOutputs(DF df, float* const* o, const float* corr, const float (*p)[kTileS],
                              const float* const* rows, int64_t ts, int64_t L) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + 2 * N <= L; i += 2 * N) {
    hn::Vec<DF> acc0[kG], acc1[kG];
    HWY_UNROLL(8)
    for (int g = 0; g < kG; ++g) {
      const auto c = hn::Set(df, corr[g]);
      acc0[g] = hn::Mul(hn::LoadU(df, o[g] + i), c);
      acc1[g] = hn::Mul(hn::LoadU(df, o[g] + i + N), c);
    }
    for (int64_t j = 0; j < ts; ++j) {
      const auto c0 = hn::LoadU(df, rows[j] + i), c1 = hn::LoadU(df, rows[j] + i + N);
      HWY_UNROLL(8)
      for (int g = 0; g < kG; ++g) {
        const auto pv = hn::Set(df, p[g][j]);
        acc0[g] = hn::MulAdd(pv, c0, acc0[g]);
        acc1[g] = hn::MulAdd(pv, c1, acc1[g]);
      }
    }
    HWY_UNROLL(8)
    for (int g = 0; g < kG; ++g) {
      hn::StoreU(acc0[g], df, o[g] + i);
      hn::StoreU(acc1[g], df, o[g] + i + N);
    }
  }
  for (; i + N <= L; i += N) {
    hn::Vec<DF> acc[kG];
    HWY_UNROLL(8)
    for (int g = 0; g < kG; ++g) acc[g] = hn::Mul(hn::LoadU(df, o[g] + i), hn::Set(df, corr[g]));
    for (int64_t j = 0; j < ts; ++j) {
      const auto cv = hn::LoadU(df, rows[j] + i);
      HWY_UNROLL(8)
      for (int g = 0; g < kG; ++g) acc[g] = hn::MulAdd(hn::Set(df, p[g][j]), cv, acc[g]);
    }
    HWY_UNROLL(8)
    for (int g = 0; g < kG; ++g) hn::StoreU(acc[g], df, o[g] + i);
  }
  for (; i < L; ++i)
    for (int g = 0; g < kG; ++g) {
      float v = o[g][i] * corr[g];
      for (int64_t j = 0; j < ts; ++j) v += p[g][j] * rows[j][i];
      o[g][i] = v;
    }
}

// Heads h0 .. h0 + kG - 1 of token t. `tile`: kTileS rows of scratch for a bf16 cache.
template <int kG>
HWY_NOINLINE void AttendGroup(const MlaAttentionArgs& a, int64_t t, int h0, float* tile) {
  const hn::ScalableTag<float> df;
  const int H = a.num_heads, L = a.kv_lora_rank, R = a.rope_dim;
  const int64_t width = L + R, row = a.cache.row_stride ? a.cache.row_stride : width;
  const int32_t* selected = a.token_selected ? a.token_selected[t] : nullptr;
  const int64_t n = selected ? a.token_num_selected[t] : a.token_pos[t] + 1;
  const int32_t* blocks = a.token_blocks[t];
  const MlaCacheView& cv = a.cache;
  const float* qa[kG];
  const float* qp[kG];
  float* o[kG];
  float m[kG], l[kG];
  for (int g = 0; g < kG; ++g) {
    const int64_t item = t * H + h0 + g;
    qa[g] = a.q_abs + item * L;
    qp[g] = a.q_pe + item * R;
    o[g] = a.out + item * L;
    std::fill_n(o[g], L, 0.0f);
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }
  HWY_ALIGN_MAX float p[kG][kTileS];
  for (int64_t s0 = 0; s0 < n; s0 += kTileS) {
    const int64_t ts = std::min(kTileS, n - s0);
    const float* rows[kTileS];
    if (cv.type == CacheType::kF32) {
      const float* base = static_cast<const float*>(cv.base);
      for (int64_t j = 0; j < ts; ++j) {
        const int64_t s = selected ? selected[s0 + j] : s0 + j;
        rows[j] = base + blocks[s / cv.block_size] * cv.block_stride + (s % cv.block_size) * row;
      }
    } else {
      const uint16_t* base = static_cast<const uint16_t*>(cv.base);
      const hn::Rebind<hwy::bfloat16_t, decltype(df)> dbf;
      const int64_t N = static_cast<int64_t>(hn::Lanes(df));
      for (int64_t j = 0; j < ts; ++j) {
        const int64_t s = selected ? selected[s0 + j] : s0 + j;
        const uint16_t* src = base + blocks[s / cv.block_size] * cv.block_stride + (s % cv.block_size) * row;
        float* dst = tile + j * width;
        int64_t i = 0;
        for (; i + N <= width; i += N)
          hn::StoreU(hn::PromoteTo(df, hn::LoadU(dbf, reinterpret_cast<const hwy::bfloat16_t*>(src + i))), df, dst + i);
        for (; i < width; ++i) dst[i] = Bf16ToF32(src[i]);
        rows[j] = dst;
      }
    }
    // Rows in pairs where the registers allow. Each (row, head) accumulator runs the same FMA
    // chain paired or not, so a head's scores do not depend on its group.
    constexpr bool kPairs = 2 * kG + 3 <= kVecRegs;
    float sc[2][kMaxGroup];
    int64_t j = 0;
    if constexpr (kPairs) {
      for (; j + 2 <= ts; j += 2) {
        ScoreRows<kG, 2>(df, qa, qp, rows + j, L, R, sc);
        for (int g = 0; g < kG; ++g) {
          p[g][j] = sc[0][g] * a.softmax_scale;
          p[g][j + 1] = sc[1][g] * a.softmax_scale;
        }
      }
    }
    for (; j < ts; ++j) {
      ScoreRows<kG, 1>(df, qa, qp, rows + j, L, R, sc);
      for (int g = 0; g < kG; ++g) p[g][j] = sc[0][g] * a.softmax_scale;
    }
    float corr[kG];
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    for (int g = 0; g < kG; ++g) {
      float m_new = m[g];
      for (int64_t j = 0; j < ts; ++j) m_new = std::max(m_new, p[g][j]);
      const auto mv = hn::Set(df, m_new);
      float sum = 0.0f;
      for (int64_t j = 0; j < ts; j += N) {
        const auto e = hn::Exp(df, hn::Sub(hn::Load(df, p[g] + j), mv));
        hn::Store(e, df, p[g] + j);
        for (int64_t k = ts; k < j + N; ++k) p[g][k] = 0.0f;  // lanes past the tile
        sum += hn::GetLane(hn::SumOfLanes(df, hn::Load(df, p[g] + j)));
      }
      corr[g] = std::exp(m[g] - m_new);  // 0 on the first tile (m = -inf)
      l[g] = l[g] * corr[g] + sum;
      m[g] = m_new;
    }
    UpdateOutputs<kG>(df, o, corr, p, rows, ts, L);
  }
  for (int g = 0; g < kG; ++g) {
    const float inv = 1.0f / l[g];
    for (int i = 0; i < L; ++i) o[g][i] *= inv;
  }
}

void AttendItems(const MlaAttentionArgs& a, int64_t item_begin, int64_t item_end, float* tile) {
  const int H = a.num_heads;
  for (int64_t item = item_begin; item < item_end;) {
    const int64_t t = item / H;
    const int h0 = static_cast<int>(item % H);
    const int g = static_cast<int>(std::min<int64_t>({kMaxGroup, H - h0, item_end - item}));
    switch (g) {
      case 1:
        AttendGroup<1>(a, t, h0, tile);
        break;
      case 2:
        AttendGroup<2>(a, t, h0, tile);
        break;
      case 3:
        AttendGroup<3>(a, t, h0, tile);
        break;
      case 4:
        AttendGroup<4>(a, t, h0, tile);
        break;
      case 5:
        AttendGroup<5>(a, t, h0, tile);
        break;
      case 6:
        AttendGroup<6>(a, t, h0, tile);
        break;
      case 7:
        AttendGroup<7>(a, t, h0, tile);
        break;
      default:
        AttendGroup<8>(a, t, h0, tile);
        break;
    }
    item += g;
  }
}

}  // namespace epserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace epserve::kernels {

HWY_EXPORT(AttendItems);

void MlaAttention(const MlaAttentionArgs& a, ThreadPool& pool) {
  const auto attend = HWY_DYNAMIC_DISPATCH(AttendItems);
  // Units of up to 8 heads (one group), fewer when that would leave threads idle.
  const int64_t items = a.num_tokens * a.num_heads;
  const int64_t grain = std::clamp<int64_t>(items / pool.num_threads(), 1, 8);
  const int64_t per_thread = MlaScratchFloats(a.kv_lora_rank + a.rope_dim);
  CHECK(a.cache.type == CacheType::kF32 || a.scratch != nullptr) << "bf16 cache needs scratch";
  pool.ParallelFor(items, grain, [&](size_t b, size_t e, int thread) {
    attend(a, static_cast<int64_t>(b), static_cast<int64_t>(e), a.scratch ? a.scratch + thread * per_thread : nullptr);
  });
}

int64_t MlaScratchFloats(int64_t row_width) {
  return kMaxTileRows * row_width;
}

void MlaAttentionReference(const MlaAttentionArgs& a) {
  const int H = a.num_heads, L = a.kv_lora_rank, R = a.rope_dim;
  const int64_t row = L + R, stride = a.cache.row_stride ? a.cache.row_stride : row;
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    for (int h = 0; h < H; ++h) {
      const float* qa = a.q_abs + (t * H + h) * L;
      const float* qp = a.q_pe + (t * H + h) * R;
      const int32_t* selected = a.token_selected ? a.token_selected[t] : nullptr;
      const int64_t n = selected ? a.token_num_selected[t] : a.token_pos[t] + 1;
      // Rows widened to float, as the kernel reads them.
      std::vector<float> rows(n * row);
      for (int64_t j = 0; j < n; ++j) {
        const int64_t s = selected ? selected[j] : j;
        const int64_t off = a.token_blocks[t][s / a.cache.block_size] * a.cache.block_stride + (s % a.cache.block_size) * stride;
        for (int64_t i = 0; i < row; ++i)
          rows[j * row + i] = a.cache.type == CacheType::kF32 ? static_cast<const float*>(a.cache.base)[off + i]
                                                              : Bf16ToF32(static_cast<const uint16_t*>(a.cache.base)[off + i]);
      }
      std::vector<double> p(n);
      double mx = -INFINITY;
      for (int64_t s = 0; s < n; ++s) {
        const float* c = rows.data() + s * row;
        double d = 0.0;
        for (int i = 0; i < L; ++i) d += static_cast<double>(qa[i]) * c[i];
        for (int i = 0; i < R; ++i) d += static_cast<double>(qp[i]) * c[L + i];
        p[s] = d * a.softmax_scale;
        mx = std::max(mx, p[s]);
      }
      double sum = 0.0;
      for (auto& v : p) sum += (v = std::exp(v - mx));
      for (int i = 0; i < L; ++i) {
        double o = 0.0;
        for (int64_t s = 0; s < n; ++s) o += p[s] / sum * rows[s * row + i];
        a.out[(t * H + h) * L + i] = static_cast<float>(o);
      }
    }
  }
}

}  // namespace epserve::kernels
#endif  // HWY_ONCE
