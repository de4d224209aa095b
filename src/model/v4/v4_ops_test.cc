#include "model/v4/v4_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace epserve::v4 {
namespace {

TEST(V4Ops, Pow2Ceil) {
  EXPECT_EQ(Pow2Ceil(1.0), 1.0);
  EXPECT_EQ(Pow2Ceil(1.5), 2.0);
  EXPECT_EQ(Pow2Ceil(0.25), 0.25);
  EXPECT_EQ(Pow2Ceil(0.3), 0.5);
}

TEST(V4Ops, E2m1RoundsToTheGridTiesToEven) {
  const float grid[] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-6, 6);
  for (int i = 0; i < 2000; ++i) {
    const float v = u(rng);
    float best = 0, bd = INFINITY;
    for (float g : grid)
      if (std::fabs(std::fabs(v) - g) < bd) bd = std::fabs(std::fabs(v) - g), best = g;
    EXPECT_EQ(E2m1Round(v), std::copysign(best, v)) << v;
  }
  EXPECT_EQ(E2m1Round(0.25f), 0.0f);  // tie: even mantissa
  EXPECT_EQ(E2m1Round(0.75f), 1.0f);
  EXPECT_EQ(E2m1Round(2.5f), 2.0f);
  EXPECT_EQ(E2m1Round(3.5f), 4.0f);
  EXPECT_EQ(E2m1Round(5.0f), 4.0f);
  EXPECT_EQ(E2m1Round(-1.25f), -1.0f);
}

TEST(V4Ops, Q4BlockScalesByAPowerOfTwo) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = 0.1f * (i - 16);
  std::vector<float> y = x;
  Q4Block(y.data(), 32);
  // amax 1.6 -> s = 2^ceil(log2(1.6 / 6)) = 0.5; values e2m1(v / 0.5) * 0.5.
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], E2m1Round(x[i] / 0.5f) * 0.5f) << i;
}

TEST(V4Ops, Q8BlockKeepsFp8Values) {
  std::vector<float> x(64, 0.0f);
  x[0] = 448.0f;
  x[1] = 1.0f;
  x[2] = 1.0625f;  // between e4m3 neighbours 1.0 and 1.125: tie to even (1.0)
  Q8Block(x.data(), 64, 64);
  EXPECT_EQ(x[0], 448.0f);
  EXPECT_EQ(x[1], 1.0f);
  EXPECT_EQ(x[2], 1.0f);
}

// Sinkhorn against a plain statement of §6.1.
TEST(V4Ops, SinkhornMatchesTheEquations) {
  const int M = 4, iters = 20;
  const double eps = 1e-6;
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0, 1);
  std::vector<float> m((2 + M) * M), base((2 + M) * M), scale = {0.7f, 1.1f, 1.3f};
  for (auto& v : m) v = n(rng);
  for (auto& v : base) v = n(rng);
  HcMix mix;
  Sinkhorn(m.data(), scale.data(), base.data(), M, iters, eps, &mix);
  double c[4][4];
  for (int j = 0; j < M; ++j) {
    double s = 0;
    for (int k = 0; k < M; ++k)
      s += std::exp(double{scale[2]} * m[2 * M + j * M + k] + base[2 * M + j * M + k]);
    for (int k = 0; k < M; ++k)
      c[j][k] =
          std::exp(double{scale[2]} * m[2 * M + j * M + k] + base[2 * M + j * M + k]) / s + eps;
  }
  for (int it = 0; it < iters; ++it) {
    if (it > 0)
      for (int j = 0; j < M; ++j) {
        double s = 0;
        for (int k = 0; k < M; ++k) s += c[j][k];
        for (int k = 0; k < M; ++k) c[j][k] /= s + eps;
      }
    for (int k = 0; k < M; ++k) {
      double s = 0;
      for (int j = 0; j < M; ++j) s += c[j][k];
      for (int j = 0; j < M; ++j) c[j][k] /= s + eps;
    }
  }
  for (int j = 0; j < M; ++j)
    for (int k = 0; k < M; ++k) EXPECT_NEAR(mix.comb[j * M + k], c[j][k], 1e-12);
  for (int k = 0; k < M; ++k) {
    EXPECT_NEAR(mix.pre[k], 1 / (1 + std::exp(-(double{scale[0]} * m[k] + base[k]))) + eps, 1e-12);
    EXPECT_NEAR(mix.post[k], 2 / (1 + std::exp(-(double{scale[1]} * m[M + k] + base[M + k]))),
                1e-12);
  }
  // Columns sum to ~1 after the last (column) step.
  for (int k = 0; k < M; ++k) {
    double s = 0;
    for (int j = 0; j < M; ++j) s += mix.comb[j * M + k];
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
}

// The ratio-4 pooling (previous group's first-half channels with this group's second half)
// against a scalar loop over the 8 candidates.
TEST(V4Ops, PoolGroupOverlappingMatchesAScalarLoop) {
  const int r = 4;
  const int64_t d = 8, cd = 2 * d;
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0, 1);
  std::vector<float> kappa(2 * r * cd), sigma(2 * r * cd);
  for (auto& v : kappa) v = n(rng);
  for (auto& v : sigma) v = n(rng);
  std::vector<int64_t> off(2 * r, 0);
  for (int i = r; i < 2 * r; ++i) off[i] = d;
  std::vector<float> out(d);
  PoolGroup({.kappa = kappa.data(),
             .sigma = sigma.data(),
             .stride = cd,
             .offsets = off.data(),
             .num_rows = 2 * r},
            d, out.data());
  for (int64_t j = 0; j < d; ++j) {
    double den = 0, num = 0;
    for (int t = 0; t < r; ++t) {
      den += std::exp(sigma[t * cd + j]);
      num += std::exp(sigma[t * cd + j]) * kappa[t * cd + j];
      den += std::exp(sigma[(r + t) * cd + d + j]);
      num += std::exp(sigma[(r + t) * cd + d + j]) * kappa[(r + t) * cd + d + j];
    }
    EXPECT_NEAR(out[j], num / den, 1e-6);
  }
  // The first group: the previous rows' -inf scores weigh nothing.
  for (int t = 0; t < r; ++t)
    for (int64_t j = 0; j < cd; ++j) sigma[t * cd + j] = -INFINITY;
  PoolGroup({.kappa = kappa.data(),
             .sigma = sigma.data(),
             .stride = cd,
             .offsets = off.data(),
             .num_rows = 2 * r},
            d, out.data());
  for (int64_t j = 0; j < d; ++j) {
    double den = 0, num = 0;
    for (int t = 0; t < r; ++t) {
      den += std::exp(sigma[(r + t) * cd + d + j]);
      num += std::exp(sigma[(r + t) * cd + d + j]) * kappa[(r + t) * cd + d + j];
    }
    EXPECT_NEAR(out[j], num / den, 1e-6);
  }
}

TEST(V4Ops, RotateThenInverseIsIdentity) {
  std::vector<double> f = {1.0, 0.1, 0.01};
  std::vector<float> x = {1, 2, 3, 4, 5, 6}, y = x;
  RotateInterleaved(y.data(), f.data(), 3, 17, RopeDirection::kForward);
  EXPECT_NE(y[0], x[0]);
  RotateInterleaved(y.data(), f.data(), 3, 17, RopeDirection::kInverse);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(y[i], x[i], 1e-5);
}

}  // namespace
}  // namespace epserve::v4
