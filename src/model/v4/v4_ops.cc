#include "model/v4/v4_ops.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "tensor/dtype.h"

namespace epserve::v4 {

double Pow2Ceil(double x) {
  int e = 0;
  const double m = std::frexp(x, &e);  // x = m 2^e, m in [0.5, 1)
  return std::ldexp(1.0, m == 0.5 ? e - 1 : e);
}

void Q8Block(float* x, int64_t n, int64_t block) {
  CHECK(n % block == 0) << "Q8Block: " << n << " values in blocks of " << block;
  for (int64_t b = 0; b < n; b += block) {
    float amax = 1e-4f;
    for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[b + i]));
    const double s = Pow2Ceil(static_cast<double>(amax) / kFp8E4M3Max);
    for (int64_t i = 0; i < block; ++i) {
      const double v = std::clamp(x[b + i] / s, -448.0, 448.0);
      x[b + i] = static_cast<float>(Fp8E4M3ToF32(F32ToFp8E4M3(static_cast<float>(v))) * s);
    }
  }
}

float E2m1Round(float v) {
  const float a = std::fabs(v);
  int e = 0;
  std::frexp(a, &e);  // floor(log2 a) = e - 1 for a > 0
  const float step = std::ldexp(1.0f, std::max(e - 1, 0) - 1);
  return std::copysign(std::nearbyint(a / step) * step, v);
}

void Q4Block(float* x, int64_t n) {
  CHECK(n % 32 == 0) << "Q4Block: " << n << " values";
  for (int64_t b = 0; b < n; b += 32) {
    double amax = 6.0 * std::ldexp(1.0, -126);
    for (int64_t i = 0; i < 32; ++i)
      amax = std::max(amax, static_cast<double>(std::fabs(x[b + i])));
    const double s = Pow2Ceil(amax / 6.0);
    for (int64_t i = 0; i < 32; ++i) {
      const double v = std::clamp(x[b + i] / s, -6.0, 6.0);
      x[b + i] = static_cast<float>(E2m1Round(static_cast<float>(v)) * s);
    }
  }
}

std::vector<double> RopeFreqs(const V4Config& c, bool compressed) {
  const int64_t r = c.rope_dim;
  const double base = compressed ? c.compress_rope_theta : c.rope_theta;
  std::vector<double> f(r / 2);
  for (int64_t i = 0; i < r / 2; ++i) f[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / r);
  if (!compressed || c.rope_original_len <= 0) return f;
  const double orig = static_cast<double>(c.rope_original_len);
  auto corr = [&](double rot) {
    return r * std::log(orig / (rot * 2 * M_PI)) / (2 * std::log(base));
  };
  const double low = std::max(std::floor(corr(c.beta_fast)), 0.0);
  double high = std::min(std::ceil(corr(c.beta_slow)), static_cast<double>(r - 1));
  if (low == high) high += 0.001;
  for (int64_t i = 0; i < r / 2; ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    f[i] = f[i] / c.rope_factor * ramp + f[i] * (1 - ramp);
  }
  return f;
}

void RotateInterleaved(float* x, const double* freqs, int64_t num_freqs, int64_t pos,
                       RopeDirection dir) {
  for (int64_t i = 0; i < num_freqs; ++i) {
    const double ang = static_cast<double>(pos) * freqs[i];
    const double c = std::cos(ang),
                 s = dir == RopeDirection::kInverse ? -std::sin(ang) : std::sin(ang);
    const double re = x[2 * i], im = x[2 * i + 1];
    x[2 * i] = static_cast<float>(re * c - im * s);
    x[2 * i + 1] = static_cast<float>(re * s + im * c);
  }
}

namespace {
double Sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }
}  // namespace

void Sinkhorn(const float* m, const float* scale, const float* base, int hc, int iters, double eps,
              HcMix* out) {
  out->pre.resize(hc);
  out->post.resize(hc);
  out->comb.resize(hc * hc);
  for (int k = 0; k < hc; ++k) {
    out->pre[k] = Sigmoid(double{scale[0]} * m[k] + base[k]) + eps;
    out->post[k] = 2 * Sigmoid(double{scale[1]} * m[hc + k] + base[hc + k]);
  }
  double* cb = out->comb.data();
  for (int j = 0; j < hc; ++j) {
    double mx = -INFINITY;
    for (int k = 0; k < hc; ++k) {
      cb[j * hc + k] = double{scale[2]} * m[2 * hc + j * hc + k] + base[2 * hc + j * hc + k];
      mx = std::max(mx, cb[j * hc + k]);
    }
    double sum = 0;
    for (int k = 0; k < hc; ++k) sum += (cb[j * hc + k] = std::exp(cb[j * hc + k] - mx));
    for (int k = 0; k < hc; ++k) cb[j * hc + k] = cb[j * hc + k] / sum + eps;
  }
  auto columns = [&] {
    for (int k = 0; k < hc; ++k) {
      double sum = 0;
      for (int j = 0; j < hc; ++j) sum += cb[j * hc + k];
      for (int j = 0; j < hc; ++j) cb[j * hc + k] /= sum + eps;
    }
  };
  auto rows = [&] {
    for (int j = 0; j < hc; ++j) {
      double sum = 0;
      for (int k = 0; k < hc; ++k) sum += cb[j * hc + k];
      for (int k = 0; k < hc; ++k) cb[j * hc + k] /= sum + eps;
    }
  };
  columns();
  for (int i = 0; i + 1 < iters; ++i) {
    rows();
    columns();
  }
}

void PoolGroup(const PoolCandidates& cand, int64_t d, float* out) {
  for (int64_t j = 0; j < d; ++j) {
    double mx = -INFINITY;
    for (int64_t r = 0; r < cand.num_rows; ++r)
      mx = std::max(mx, double{cand.sigma[r * cand.stride + cand.offsets[r] + j]});
    double num = 0, den = 0;
    for (int64_t r = 0; r < cand.num_rows; ++r) {
      const int64_t at = r * cand.stride + cand.offsets[r] + j;
      const double w = std::exp(cand.sigma[at] - mx);
      den += w;
      num += w * cand.kappa[at];
    }
    out[j] = static_cast<float>(num / den);
  }
}

}  // namespace epserve::v4
