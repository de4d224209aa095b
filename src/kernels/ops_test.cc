#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/test_util.h"

namespace epserve::kernels {
namespace {

TEST(OpsTest, RopeRotatesAdjacentPairs) {
  // (x0, x1) = (1, 0) rotated by 90 degrees -> (0, 1); (x2, x3) by 0 stays.
  std::vector<float> x = {1, 0, 3, 4};
  std::vector<float> cs = {0, 1, 1, 0};  // cos/sin per pair
  ApplyRope(x.data(), cs.data(), 4);
  EXPECT_NEAR(x[0], 0, 1e-7);
  EXPECT_NEAR(x[1], 1, 1e-7);
  EXPECT_EQ(x[2], 3);
  EXPECT_EQ(x[3], 4);
}

TEST(OpsTest, RmsNorm) {
  std::vector<float> x = {3, 4}, w = {1, 2}, out(2);
  RmsNorm(x.data(), w.data(), 2, 0.0f, out.data());
  float rms = std::sqrt(12.5f);
  EXPECT_NEAR(out[0], 3 / rms, 1e-6);
  EXPECT_NEAR(out[1], 8 / rms, 1e-6);
}

TEST(OpsTest, SoftmaxAndSilu) {
  std::vector<float> x = {0, std::log(3.0f)};
  Softmax(x.data(), 2);
  EXPECT_NEAR(x[0], 0.25, 1e-6);
  EXPECT_NEAR(x[1], 0.75, 1e-6);
  float g = 2.0f, u = 3.0f, o;
  SiluMul(&g, &u, 1, &o);
  EXPECT_NEAR(o, 2.0f / (1.0f + std::exp(-2.0f)) * 3.0f, 1e-6);
}

TEST(OpsTest, FindsNaNAndInfinityAnywhere) {
  std::vector<float> x(67, 1.5f);
  x[3] = -0.0f;
  x[9] = std::numeric_limits<float>::max();
  x[10] = std::numeric_limits<float>::denorm_min();
  EXPECT_TRUE(AllFinite(x.data(), 67));
  EXPECT_EQ(FirstNonFinite(x.data(), 67), 67);
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
        std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
    for (int64_t at : {0, 31, 66}) {
      std::vector<float> y = x;
      y[at] = bad;
      EXPECT_FALSE(AllFinite(y.data(), 67));
      EXPECT_TRUE(AllFinite(y.data(), at));  // only what lies before it
      EXPECT_EQ(FirstNonFinite(y.data(), 67), at);
    }
  }
}

}  // namespace
}  // namespace epserve::kernels

namespace epserve::kernels {
namespace {

using testing::ForEachTarget;
using testing::RandomVector;

TEST(OpsSimdTest, MatchScalarTwinsOnEveryTarget) {
  for (int64_t n : {1, 5, 64, 300, 7168}) {
    std::vector<float> x = RandomVector(n, 1), w = RandomVector(n, 2), up = RandomVector(n, 3);
    for (auto& v : x) v *= 3.0f;
    std::vector<float> ref(n), silu_ref(n), rope_ref = x;
    RmsNormReference(x.data(), w.data(), n, 1e-6f, ref.data());
    SiluMulReference(x.data(), up.data(), n, silu_ref.data());
    std::vector<float> cs(n);
    for (int64_t i = 0; i + 1 < n; i += 2) {
      cs[i] = std::cos(0.1f * i);
      cs[i + 1] = std::sin(0.1f * i);
    }
    const int64_t rope_dim = n & ~int64_t{1};
    ApplyRopeReference(rope_ref.data(), cs.data(), rope_dim);
    ForEachTarget([&] {
      std::vector<float> out(n), silu(n), rope = x, y(n, 1.0f);
      RmsNorm(x.data(), w.data(), n, 1e-6f, out.data());
      SiluMul(x.data(), up.data(), n, silu.data());
      ApplyRope(rope.data(), cs.data(), rope_dim);
      Axpy(0.5f, x.data(), n, y.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(out[i], ref[i], 1e-5f * (1 + std::fabs(ref[i]))) << n << " @" << i;
        ASSERT_NEAR(silu[i], silu_ref[i], 1e-5f * (1 + std::fabs(silu_ref[i]))) << n << " @" << i;
        ASSERT_NEAR(rope[i], rope_ref[i], 1e-5f * (1 + std::fabs(rope_ref[i]))) << n << " @" << i;
        ASSERT_NEAR(y[i], 1.0f + 0.5f * x[i], 1e-6f * (1 + std::fabs(x[i]))) << n << " @" << i;
      }
    });
  }
}

}  // namespace
}  // namespace epserve::kernels
