#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

namespace epserve {
namespace {

TEST(DTypeTest, Fp8KnownValues) {
  EXPECT_EQ(Fp8E4M3ToF32(0x38), 1.0f);
  EXPECT_EQ(Fp8E4M3ToF32(0x7e), 448.0f);
  EXPECT_EQ(Fp8E4M3ToF32(0xfe), -448.0f);
  EXPECT_EQ(Fp8E4M3ToF32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(Fp8E4M3ToF32(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(Fp8E4M3ToF32(0x3c), 1.5f);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToF32(0x7f)));
  EXPECT_TRUE(std::isnan(Fp8E4M3ToF32(0xff)));
}

TEST(DTypeTest, Fp8RoundTripAllCodes) {
  for (int i = 0; i < 256; ++i) {
    if (i == 0x7f || i == 0xff || i == 0x80) continue;  // NaNs and -0
    EXPECT_EQ(F32ToFp8E4M3(Fp8E4M3ToF32(i)), i) << i;
  }
}

TEST(DTypeTest, Fp8RoundsToNearest) {
  EXPECT_EQ(F32ToFp8E4M3(1.06f), 0x38);    // 1.0 vs 1.125: nearer 1.0
  EXPECT_EQ(F32ToFp8E4M3(1.07f), 0x39);    // nearer 1.125
  EXPECT_EQ(F32ToFp8E4M3(1000.0f), 0x7e);  // saturates
  EXPECT_EQ(F32ToFp8E4M3(-1000.0f), 0xfe);
}

TEST(DTypeTest, Fp8EncodeIsNearestCode) {
  // Brute force over all finite codes for values spread over the whole range.
  for (int i = 0; i < 20000; ++i) {
    float v = std::ldexp(1.0f + (i % 997) / 997.0f, (i % 26) - 16) * ((i & 1) ? -1.0f : 1.0f);
    uint8_t got = F32ToFp8E4M3(v);
    float best = INFINITY;
    for (int c = 0; c < 256; ++c) {
      float cv = Fp8E4M3ToF32(c);
      if (!std::isnan(cv))
        best = std::fmin(best, std::fabs(cv - std::fmax(-448.f, std::fmin(448.f, v))));
    }
    EXPECT_EQ(std::fabs(Fp8E4M3ToF32(got) - std::fmax(-448.f, std::fmin(448.f, v))), best) << v;
  }
}

TEST(DTypeTest, Bf16RoundTrip) {
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f)), 1.0f);
  EXPECT_EQ(Bf16ToF32(F32ToBf16(-3.5f)), -3.5f);
  float x = 1.0f + std::ldexp(1.0f, -9);  // below bf16 resolution: rounds to 1
  EXPECT_EQ(Bf16ToF32(F32ToBf16(x)), 1.0f);
  EXPECT_NEAR(Bf16ToF32(F32ToBf16(3.14159f)), 3.14159f, 0.01f);
}

// Every safetensors spelling parses to the type whose name it is; the load-time types
// (I8_PACKED, F4_E2M1) are no file's dtype.
TEST(DTypeTest, SafetensorsSpellingsRoundTrip) {
  const struct {
    DType dtype;
    size_t size;
  } cases[] = {{DType::kF32, 4}, {DType::kBF16, 2}, {DType::kF8E4M3, 1}, {DType::kF8E8M0, 1},
               {DType::kI8, 1},  {DType::kI32, 4},  {DType::kI64, 8}};
  for (const auto& c : cases) {
    DType parsed = DType::kF4E2M1;
    ASSERT_TRUE(ParseDType(DTypeName(c.dtype), &parsed)) << DTypeName(c.dtype);
    EXPECT_EQ(parsed, c.dtype);
    EXPECT_EQ(DTypeSize(c.dtype), c.size) << DTypeName(c.dtype);
  }
  DType d;
  EXPECT_FALSE(ParseDType("I8_PACKED", &d));
  EXPECT_FALSE(ParseDType("F4_E2M1", &d));
  EXPECT_FALSE(ParseDType("F16", &d));
}

}  // namespace
}  // namespace epserve
