// The lightning indexer's kernels (sparse_index.h). IndexScores widens each key's FP8 bytes to
// float once and scores it against every head's query with vector FMAs; the query is widened
// once per call.
#include "kernels/sparse_index.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "base/check.h"
#include "kernels/quant.h"
#include "tensor/dtype.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/sparse_index.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// (foreach_target.h re-includes this file once per target; what follows comes after it.)
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace epserve::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Scores of positions [begin, end); qf: the query widened, [num_heads, head_dim].
void ScoreRange(const IndexScoreArgs& a, const float* qf, int64_t begin, int64_t end) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int D = a.head_dim, H = a.num_heads;
  HWY_ALIGN_MAX float k[kIndexBlock];
  for (int64_t s = begin; s < end; ++s) {
    const uint8_t* key = a.keys.base + a.blocks[s / a.keys.block_size] * a.keys.block_stride +
                         (s % a.keys.block_size) * a.keys.row_stride;
    for (int i = 0; i < D; ++i) k[i] = Fp8E4M3ToF32(key[i]);
    float k_scale;
    std::memcpy(&k_scale, key + D, sizeof(float));
    float sum = 0.0f;
    for (int h = 0; h < H; ++h) {
      const float* q = qf + int64_t{h} * D;
      auto acc0 = hn::Zero(df), acc1 = hn::Zero(df);
      int64_t i = 0;
      for (; i + 2 * N <= D; i += 2 * N) {
        acc0 = hn::MulAdd(hn::LoadU(df, q + i), hn::Load(df, k + i), acc0);
        acc1 = hn::MulAdd(hn::LoadU(df, q + i + N), hn::Load(df, k + i + N), acc1);
      }
      for (; i + N <= D; i += N) acc0 = hn::MulAdd(hn::LoadU(df, q + i), hn::Load(df, k + i), acc0);
      float dot = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
      for (; i < D; ++i) dot += q[i] * k[i];
      sum += std::max(dot, 0.0f) * a.weights[h];
    }
    a.scores[s] = sum * k_scale;
  }
}

}  // namespace epserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace epserve::kernels {

HWY_EXPORT(ScoreRange);

float QuantizeIndexFp8(const float* x, int n, bool ue8m0, uint8_t* q) {
  float amax = 1e-4f;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  float s = amax * (1.0f / kFp8E4M3Max);
  if (ue8m0) s = RoundScaleUe8m0(s);
  for (int i = 0; i < n; ++i) q[i] = F32ToFp8E4M3(std::clamp(x[i] / s, -kFp8E4M3Max, kFp8E4M3Max));
  return s;
}

void HadamardRotate(float* x, int n) {
  CHECK(n > 0 && (n & (n - 1)) == 0) << "Hadamard size " << n << " is not a power of two";
  for (int h = 1; h < n; h *= 2)
    for (int i = 0; i < n; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const float scale = 1.0f / std::sqrt(static_cast<float>(n));
  for (int i = 0; i < n; ++i) x[i] *= scale;
}

namespace {
std::vector<float> WidenQuery(const IndexScoreArgs& a) {
  std::vector<float> qf(static_cast<size_t>(a.num_heads) * a.head_dim);
  for (size_t i = 0; i < qf.size(); ++i) qf[i] = Fp8E4M3ToF32(a.q[i]);
  return qf;
}
}  // namespace

void IndexScores(const IndexScoreArgs& a, ThreadPool& pool) {
  CHECK(a.head_dim <= kIndexBlock) << "index head_dim " << a.head_dim;
  const std::vector<float> qf = WidenQuery(a);
  const auto score = HWY_DYNAMIC_DISPATCH(ScoreRange);
  pool.ParallelFor(static_cast<size_t>(a.num_positions), 64, [&](size_t b, size_t e, int) {
    score(a, qf.data(), static_cast<int64_t>(b), static_cast<int64_t>(e));
  });
}

void IndexScoresReference(const IndexScoreArgs& a) {
  const std::vector<float> qf = WidenQuery(a);
  const int D = a.head_dim;
  for (int64_t s = 0; s < a.num_positions; ++s) {
    const uint8_t* key = a.keys.base + a.blocks[s / a.keys.block_size] * a.keys.block_stride +
                         (s % a.keys.block_size) * a.keys.row_stride;
    float k_scale;
    std::memcpy(&k_scale, key + D, sizeof(float));
    double sum = 0.0;
    for (int h = 0; h < a.num_heads; ++h) {
      double dot = 0.0;
      for (int i = 0; i < D; ++i) dot += double{qf[int64_t{h} * D + i]} * Fp8E4M3ToF32(key[i]);
      sum += std::max(dot, 0.0) * a.weights[h];
    }
    a.scores[s] = static_cast<float>(sum * k_scale);
  }
}

void SelectTopK(const float* scores, int64_t n, int64_t k, int32_t* out) {
  CHECK(k >= 0 && k <= n) << "top " << k << " of " << n;
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  // Better: a larger score, then the lower position; NaN ranks below everything.
  auto better = [scores](int32_t a, int32_t b) {
    const float x = scores[a], y = scores[b];
    const bool xn = std::isnan(x), yn = std::isnan(y);
    if (xn != yn) return yn;
    if (!xn && x != y) return x > y;
    return a < b;
  };
  if (k < n) std::nth_element(idx.begin(), idx.begin() + k, idx.end(), better);
  std::sort(idx.begin(), idx.begin() + k);
  std::copy(idx.begin(), idx.begin() + k, out);
}

}  // namespace epserve::kernels
#endif  // HWY_ONCE
