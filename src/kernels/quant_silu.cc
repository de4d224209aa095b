#include "kernels/quant_silu.h"

#include <algorithm>
#include <cmath>

#include "kernels/quant.h"
#include "tensor/dtype.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/quant_silu.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// (foreach_target.h re-includes this file once per target; what follows comes after it.)
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace epserve::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// e4m3 codes of Lanes(df) floats, exactly as F32ToFp8E4M3 (tensor/dtype.cc) computes them.
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> EncodeE4m3(DF df, hn::Vec<DF> v) {
  const hn::RebindToUnsigned<DF> du;
  const auto bits = hn::BitCast(du, v);
  const auto sign = hn::ShiftRight<24>(hn::And(bits, hn::Set(du, 0x80000000u)));
  const auto a = hn::Abs(v);
  // Normal codes: rebias the exponent (127 -> 7), round the mantissa to 3 bits, ties to even.
  auto x = hn::Sub(hn::BitCast(du, a), hn::Set(du, (127u - 7u) << 23));
  x = hn::Add(x, hn::Add(hn::Set(du, 0x7ffffu), hn::And(hn::ShiftRight<20>(x), hn::Set(du, 1u))));
  auto code = hn::Min(hn::ShiftRight<20>(x), hn::Set(du, 0x7eu));
  // Below 2^-6: subnormal codes, spacing 2^-9 (NearestInt rounds half to even).
  const auto sub = hn::BitCast(du, hn::NearestInt(hn::Mul(a, hn::Set(df, 512.0f))));
  code = hn::IfThenElse(hn::RebindMask(du, hn::Lt(a, hn::Set(df, 0.015625f))), sub, code);
  code = hn::IfThenElse(hn::RebindMask(du, hn::Ge(a, hn::Set(df, kFp8E4M3Max))), hn::Set(du, 0x7eu),
                        code);
  code = hn::Or(code, sign);
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), hn::Set(du, 0x7fu), code);
}

template <class DF>
HWY_INLINE void StoreCodes(DF df, hn::Vec<DF> v, uint8_t* q) {
  const hn::Rebind<uint8_t, DF> d8;
  const hn::RebindToSigned<DF> di;
  hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di, EncodeE4m3(df, v))), d8, q);
}

// Quantizes one block of len <= 128 values already in `v` (a stack buffer).
template <class DF>
HWY_INLINE void QuantizeBlock(DF df, const float* v, int64_t len, uint8_t* q, float* scale,
                              bool ue8m0) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto amax_v = hn::Zero(df);
  int64_t i = 0;
  for (; i + N <= len; i += N) amax_v = hn::Max(amax_v, hn::Abs(hn::LoadU(df, v + i)));
  float amax = hn::GetLane(hn::MaxOfLanes(df, amax_v));
  for (; i < len; ++i) amax = std::fmax(amax, std::fabs(v[i]));
  float s = amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
  if (ue8m0) s = RoundScaleUe8m0(s);
  *scale = s;
  const float inv = 1.0f / s;
  const auto inv_v = hn::Set(df, inv);
  for (i = 0; i + N <= len; i += N) StoreCodes(df, hn::Mul(hn::LoadU(df, v + i), inv_v), q + i);
  for (; i < len; ++i) q[i] = F32ToFp8E4M3(v[i] * inv);
}

void QuantizeBlocks(const float* x, int64_t n, uint8_t* q, float* scales, bool ue8m0) {
  const hn::ScalableTag<float> df;
  for (int64_t b = 0; b < n; b += kFp8BlockSize)
    QuantizeBlock(df, x + b, std::min<int64_t>(kFp8BlockSize, n - b), q + b,
                  scales + b / kFp8BlockSize, ue8m0);
}

void SiluMulQuantRows(const SiluMulQuantArgs& a, int64_t row_begin, int64_t row_end) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t stride = a.in_stride ? a.in_stride : a.row_len;
  const int64_t blocks = (a.row_len + kFp8BlockSize - 1) / kFp8BlockSize;
  const auto one = hn::Set(df, 1.0f);
  HWY_ALIGN_MAX float v[kFp8BlockSize];
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* g = a.gate + r * stride;
    const float* u = a.up + r * stride;
    for (int64_t b = 0; b < a.row_len; b += kFp8BlockSize) {
      const int64_t len = std::min<int64_t>(kFp8BlockSize, a.row_len - b);
      int64_t i = 0;
      for (; i + N <= len; i += N) {
        const auto gv = hn::LoadU(df, g + b + i);
        const auto silu = hn::Div(gv, hn::Add(one, hn::Exp(df, hn::Neg(gv))));
        hn::Store(hn::Mul(silu, hn::LoadU(df, u + b + i)), df, v + i);
      }
      for (; i < len; ++i) v[i] = g[b + i] / (1.0f + std::exp(-g[b + i])) * u[b + i];
      QuantizeBlock(df, v, len, a.q + r * a.row_len + b, a.scales + r * blocks + b / kFp8BlockSize,
                    false);
    }
  }
}

}  // namespace epserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace epserve::kernels {

HWY_EXPORT(QuantizeBlocks);
HWY_EXPORT(SiluMulQuantRows);

void QuantizeBlocksFp8(const float* x, int64_t n, uint8_t* q, float* scales, bool ue8m0) {
  HWY_DYNAMIC_DISPATCH(QuantizeBlocks)(x, n, q, scales, ue8m0);
}

void SiluMulQuantFp8(const SiluMulQuantArgs& args, ThreadPool& pool) {
  if (args.num_rows <= 0 || args.row_len <= 0) return;
  const auto rows = HWY_DYNAMIC_DISPATCH(SiluMulQuantRows);
  // At least ~64 K values per work unit: smaller inputs are not worth a wake-up.
  const size_t grain = static_cast<size_t>(std::max<int64_t>(1, (int64_t{1} << 16) / args.row_len));
  pool.ParallelFor(static_cast<size_t>(args.num_rows), grain, [&](size_t b, size_t e, int) {
    rows(args, static_cast<int64_t>(b), static_cast<int64_t>(e));
  });
}

void SiluMulQuantFp8Reference(const SiluMulQuantArgs& a) {
  const int64_t stride = a.in_stride ? a.in_stride : a.row_len;
  const int64_t blocks = (a.row_len + kFp8BlockSize - 1) / kFp8BlockSize;
  float v[kFp8BlockSize];
  for (int64_t r = 0; r < a.num_rows; ++r) {
    for (int64_t b = 0; b < a.row_len; b += kFp8BlockSize) {
      const int64_t len = std::min<int64_t>(kFp8BlockSize, a.row_len - b);
      float amax = 0.0f;
      for (int64_t i = 0; i < len; ++i) {
        const float g = a.gate[r * stride + b + i];
        v[i] = g / (1.0f + std::exp(-g)) * a.up[r * stride + b + i];
        amax = std::fmax(amax, std::fabs(v[i]));
      }
      const float s = amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
      a.scales[r * blocks + b / kFp8BlockSize] = s;
      const float inv = 1.0f / s;
      for (int64_t i = 0; i < len; ++i) a.q[r * a.row_len + b + i] = F32ToFp8E4M3(v[i] * inv);
    }
  }
}

}  // namespace epserve::kernels
#endif  // HWY_ONCE
