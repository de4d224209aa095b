#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

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

}  // namespace
}  // namespace epserve::kernels
