#include "kernels/quant_silu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "kernels/quant.h"
#include "kernels/test_util.h"
#include "tensor/dtype.h"

namespace epserve::kernels {
namespace {

using testing::ForEachTarget;
using testing::RandomVector;

// Values that probe every rounding path of e4m3: ties between codes, the subnormal range and
// its boundary, the saturation at 448, signed zeros.
std::vector<float> TrickyValues() {
  std::vector<float> v;
  for (int code = 0; code < 0x7f; ++code) {
    const float a = Fp8E4M3ToF32(static_cast<uint8_t>(code));
    const float b = Fp8E4M3ToF32(static_cast<uint8_t>(code + 1));
    for (float x : {a, 0.5f * (a + b), std::nextafter(0.5f * (a + b), 0.0f),
                    std::nextafter(0.5f * (a + b), 1e9f)})
      if (std::isfinite(x)) v.push_back(x);
  }
  for (float x : {0.015625f, std::nextafter(0.015625f, 0.0f), 447.9f, 448.0f, 0.0f, -0.0f})
    v.push_back(x);
  const size_t n = v.size();
  for (size_t i = 0; i < n; ++i) v.push_back(-v[i]);
  return v;
}

TEST(QuantizeBlocksFp8Test, BitIdenticalToScalarEncoding) {
  // One block whose amax is 448 exactly (scale 1), so every value is encoded as given.
  std::vector<float> v = TrickyValues();
  ForEachTarget([&] {
    for (size_t b = 0; b < v.size(); b += 127) {
      std::vector<float> block(v.begin() + b, v.begin() + std::min(v.size(), b + 127));
      block.push_back(448.0f);
      std::vector<uint8_t> q(block.size());
      float scale = 0;
      QuantizeBlocksFp8(block.data(), static_cast<int64_t>(block.size()), q.data(), &scale);
      ASSERT_EQ(scale, 1.0f);
      for (size_t i = 0; i < block.size(); ++i) ASSERT_EQ(q[i], F32ToFp8E4M3(block[i])) << block[i];
    }
  });
}

TEST(QuantizeBlocksFp8Test, ScalesAndZeroBlocks) {
  const int64_t n = 300;
  std::vector<float> x = RandomVector(n, 1);
  for (int64_t i = 128; i < 256; ++i) x[i] = 0.0f;
  ForEachTarget([&] {
    std::vector<uint8_t> q(n);
    std::vector<float> s(3);
    QuantizeBlocksFp8(x.data(), n, q.data(), s.data());
    EXPECT_EQ(s[1], 1.0f);
    for (int b : {0, 2}) {
      float amax = 0;
      for (int64_t i = b * 128; i < std::min<int64_t>(n, (b + 1) * 128); ++i)
        amax = std::fmax(amax, std::fabs(x[i]));
      EXPECT_EQ(s[b], amax / 448.0f);
      for (int64_t i = b * 128; i < std::min<int64_t>(n, (b + 1) * 128); ++i)
        ASSERT_EQ(q[i], F32ToFp8E4M3(x[i] * (1.0f / s[b])));
    }
  });
}

// UE8M0 (scale_fmt ue8m0): each scale is the smallest power of two >= amax / 448, and the
// vectorized quantizer gives the scalar twin's (QuantizeRowFp8's) bytes and scales.
TEST(QuantizeBlocksFp8Test, Ue8m0ScalesArePowersOfTwoAndMatchTheTwin) {
  EXPECT_EQ(RoundScaleUe8m0(1.0f), 1.0f);
  EXPECT_EQ(RoundScaleUe8m0(0.75f), 1.0f);
  EXPECT_EQ(RoundScaleUe8m0(std::nextafter(0.25f, 1.0f)), 0.5f);
  EXPECT_EQ(RoundScaleUe8m0(3.5f / 448.0f), 1.0f / 128);
  const int64_t n = 300;
  std::vector<float> x = RandomVector(n, 2);
  for (int64_t i = 128; i < 256; ++i) x[i] *= 0.01f;
  std::vector<uint8_t> want_q(n);
  std::vector<float> want_s(3);
  QuantizeRowFp8(x.data(), n, want_q.data(), want_s.data(), /*ue8m0=*/true);
  for (int b = 0; b < 3; ++b) {
    float amax = 0;
    for (int64_t i = b * 128; i < std::min<int64_t>(n, (b + 1) * 128); ++i)
      amax = std::fmax(amax, std::fabs(x[i]));
    int e = 0;
    EXPECT_EQ(std::frexp(want_s[b], &e), 0.5f) << "not a power of two: " << want_s[b];
    EXPECT_GE(want_s[b], amax / 448.0f);
    EXPECT_LT(want_s[b], 2 * amax / 448.0f);
  }
  ForEachTarget([&] {
    std::vector<uint8_t> q(n);
    std::vector<float> s(3);
    QuantizeBlocksFp8(x.data(), n, q.data(), s.data(), /*ue8m0=*/true);
    EXPECT_EQ(s, want_s);
    EXPECT_EQ(q, want_q);
  });
}

TEST(SiluMulQuantFp8Test, MatchesReferenceWithinOneCode) {
  const int64_t rows = 5, len = 300, stride = 304;
  std::vector<float> g = RandomVector(rows * stride, 2), u = RandomVector(rows * stride, 3);
  for (auto& x : g) x *= 4.0f;  // saturated and linear SiLU regions
  const int64_t blocks = 3;
  std::vector<uint8_t> q_ref(rows * len);
  std::vector<float> s_ref(rows * blocks);
  SiluMulQuantArgs args{.gate = g.data(),
                        .up = u.data(),
                        .num_rows = rows,
                        .row_len = len,
                        .in_stride = stride,
                        .q = q_ref.data(),
                        .scales = s_ref.data()};
  SiluMulQuantFp8Reference(args);
  ThreadPool pool(2);
  ForEachTarget([&] {
    std::vector<uint8_t> q(rows * len);
    std::vector<float> s(rows * blocks);
    args.q = q.data();
    args.scales = s.data();
    SiluMulQuantFp8(args, pool);
    for (int64_t i = 0; i < rows * blocks; ++i) ASSERT_NEAR(s[i], s_ref[i], 1e-6 * s_ref[i]);
    for (int64_t i = 0; i < rows * len; ++i) {
      // Same sign; magnitudes at most one code apart (SIMD exp differs in the last ulp).
      ASSERT_EQ(q[i] & 0x80, q_ref[i] & 0x80) << i;
      ASSERT_LE(std::abs((q[i] & 0x7f) - (q_ref[i] & 0x7f)), 1) << i;
    }
  });
}

}  // namespace
}  // namespace epserve::kernels
