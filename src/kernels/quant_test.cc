#include "kernels/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensor/dtype.h"

namespace epserve::kernels {
namespace {

TEST(QuantTest, BlockScalesAndBoundedError) {
  const int64_t n = 300;  // two full blocks and a partial one
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = std::sin(0.37f * i) * (i < 128 ? 1.0f : (i < 256 ? 100.0f : 0.01f));
  std::vector<uint8_t> q(n);
  std::vector<float> s(Fp8ScaleCount(n)), y(n);
  ASSERT_EQ(s.size(), 3u);
  QuantizeRowFp8(x.data(), n, q.data(), s.data());
  DequantizeRowFp8(q.data(), s.data(), n, y.data());
  for (int b = 0; b < 3; ++b) {
    float amax = 0;
    for (int64_t i = b * 128; i < std::min<int64_t>(n, (b + 1) * 128); ++i) amax = std::fmax(amax, std::fabs(x[i]));
    EXPECT_FLOAT_EQ(s[b], amax / 448.0f);
    for (int64_t i = b * 128; i < std::min<int64_t>(n, (b + 1) * 128); ++i)
      EXPECT_LE(std::fabs(y[i] - x[i]), amax * 0.0625f + 1e-12f) << i;  // 3 mantissa bits
  }
  // The block max maps exactly to +-448.
  std::vector<float> z = x;
  RoundTripFp8(z.data(), n);
  EXPECT_EQ(z, y);
}

TEST(QuantTest, ZeroBlock) {
  std::vector<float> x(128, 0.0f);
  std::vector<uint8_t> q(128);
  float s;
  QuantizeRowFp8(x.data(), 128, q.data(), &s);
  EXPECT_EQ(s, 1.0f);
  for (uint8_t v : q) EXPECT_EQ(v, 0);
}

}  // namespace
}  // namespace epserve::kernels
