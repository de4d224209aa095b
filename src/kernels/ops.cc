// Small kernels, vectorized with Highway where they touch whole hidden vectors (RMSNorm,
// SiLU * up, Axpy, RoPE); Softmax (router scores only) stays scalar. Each has a scalar twin.
#include "kernels/ops.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/ops.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// (foreach_target.h re-includes this file once per target; what follows comes after it.)
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace epserve::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void RmsNormImpl(const float* x, const float* weight, int64_t n, float eps, float* out) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto s0 = hn::Zero(df), s1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto a = hn::LoadU(df, x + i), b = hn::LoadU(df, x + i + N);
    s0 = hn::MulAdd(a, a, s0);
    s1 = hn::MulAdd(b, b, s1);
  }
  double ss = hn::GetLane(hn::SumOfLanes(df, hn::Add(s0, s1)));
  for (; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  const auto inv_v = hn::Set(df, inv);
  for (i = 0; i + N <= n; i += N)
    hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(df, x + i), inv_v), hn::LoadU(df, weight + i)), df,
               out + i);
  for (; i < n; ++i) out[i] = x[i] * inv * weight[i];
}

void SiluMulImpl(const float* gate, const float* up, int64_t n, float* out) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto one = hn::Set(df, 1.0f);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto g = hn::LoadU(df, gate + i);
    const auto silu = hn::Div(g, hn::Add(one, hn::Exp(df, hn::Neg(g))));
    hn::StoreU(hn::Mul(silu, hn::LoadU(df, up + i)), df, out + i);
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void AxpyImpl(float scale, const float* x, int64_t n, float* y) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto s = hn::Set(df, scale);
  int64_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::MulAdd(s, hn::LoadU(df, x + i), hn::LoadU(df, y + i)), df, y + i);
  for (; i < n; ++i) y[i] += scale * x[i];
}

void ApplyRopeImpl(float* x, const float* cos_sin, int64_t rope_dim) {
  int64_t i = 0;
#if HWY_TARGET != HWY_SCALAR  // pairs need two lanes
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  // (a, b) -> (a c - b s, a s + b c): x * cos + swap(x) * (-s, +s).
  for (; i + N <= rope_dim; i += N) {
    const auto v = hn::LoadU(df, x + i), cs = hn::LoadU(df, cos_sin + i);
    const auto c = hn::DupEven(cs), s = hn::DupOdd(cs);
    const auto signed_s = hn::OddEven(s, hn::Neg(s));
    hn::StoreU(hn::MulAdd(v, c, hn::Mul(hn::Shuffle2301(v), signed_s)), df, x + i);
  }
#endif
  for (; i + 1 < rope_dim; i += 2) {
    const float c = cos_sin[i], s = cos_sin[i + 1], a = x[i], b = x[i + 1];
    x[i] = a * c - b * s;
    x[i + 1] = a * s + b * c;
  }
}

}  // namespace epserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace epserve::kernels {

HWY_EXPORT(RmsNormImpl);
HWY_EXPORT(SiluMulImpl);
HWY_EXPORT(AxpyImpl);
HWY_EXPORT(ApplyRopeImpl);

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  HWY_DYNAMIC_DISPATCH(RmsNormImpl)(x, weight, n, eps, out);
}
void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(SiluMulImpl)(gate, up, n, out);
}
void Axpy(float scale, const float* x, int64_t n, float* y) {
  HWY_DYNAMIC_DISPATCH(AxpyImpl)(scale, x, n, y);
}
void ApplyRope(float* x, const float* cos_sin, int64_t rope_dim) {
  HWY_DYNAMIC_DISPATCH(ApplyRopeImpl)(x, cos_sin, rope_dim);
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::fmax(mx, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

namespace {
// Exponent bits all ones: NaN or +-Inf. Tested on the bits so it holds under any float flags.
inline uint32_t NonFiniteBit(const float* p) {
  uint32_t b;
  std::memcpy(&b, p, sizeof(b));
  return static_cast<uint32_t>((b & 0x7f800000u) == 0x7f800000u);
}
}  // namespace

bool AllFinite(const float* x, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= NonFiniteBit(x + i);
  return bad == 0;
}

int64_t FirstNonFinite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (NonFiniteBit(x + i) != 0) return i;
  return n;
}

void RmsNormReference(const float* x, const float* weight, int64_t n, float eps, float* out) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * weight[i];
}

void SiluMulReference(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void ApplyRopeReference(float* x, const float* cos_sin, int64_t rope_dim) {
  for (int64_t i = 0; i < rope_dim / 2; ++i) {
    const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
    const float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * c - b * s;
    x[2 * i + 1] = a * s + b * c;
  }
}

}  // namespace epserve::kernels
#endif  // HWY_ONCE
