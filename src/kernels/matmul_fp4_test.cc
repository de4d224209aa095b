// FP4 e2m1 weights (DeepSeek-V4's routed experts) through MatMul and GroupedMlp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/fp4.h"
#include "kernels/grouped_gemm.h"
#include "kernels/matmul.h"
#include "kernels/test_util.h"

namespace epserve::kernels {
namespace {

struct Fp4Weight {
  std::vector<uint8_t> bytes, scales;
  WeightView view;
};

// Random nibbles and scale bytes 2^-8 .. 2^-3 (the magnitudes of trained expert weights).
Fp4Weight MakeFp4(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  Fp4Weight w;
  w.bytes.resize(n * k / 2);
  w.scales.resize(n * k / kFp4BlockSize);
  for (auto& b : w.bytes) b = static_cast<uint8_t>(rng());
  for (auto& s : w.scales) s = static_cast<uint8_t>(119 + rng() % 6);
  w.view = WeightView{.dtype = DType::kF4E2M1,
                      .rows = n,
                      .cols = k,
                      .data = w.bytes.data(),
                      .scale_ue8m0 = w.scales.data()};
  return w;
}

TEST(Fp4Test, TableDecoderEqualsTheBitFieldTwinForEveryCode) {
  // Every byte (both nibbles) under several scales, including the smallest and 2^0.
  std::vector<uint8_t> bytes(256 * 2), scales;
  for (int i = 0; i < 512; ++i) bytes[i] = static_cast<uint8_t>(i % 256);
  for (uint8_t s : {0,   1,   100, 127, 130, 200, 254, 127, 120, 127, 126, 125, 124, 123, 122, 121,
                    119, 118, 117, 116, 115, 114, 113, 112, 111, 110, 109, 108, 107, 106, 105, 104})
    scales.push_back(s);
  const WeightView w{.dtype = DType::kF4E2M1,
                     .rows = 1,
                     .cols = 1024,
                     .data = bytes.data(),
                     .scale_ue8m0 = scales.data()};
  std::vector<float> table(1024), twin(1024);
  DecodeFp4Row(w, 0, table.data());
  DequantizeRow(w, 0, 0, 1024, twin.data());
  for (int k = 0; k < 1024; ++k) ASSERT_EQ(table[k], twin[k]) << k;
  // Byte 0x71 (elements 226, 227: block 7, scale byte 127 = 2^0): low nibble 1 = 0.5, high
  // nibble 7 = 6; byte 0x0F (elements 30, 31: block 0, scale byte 0 = 2^-127): -6 and 0.
  EXPECT_EQ(table[2 * 0x71], 0.5f);
  EXPECT_EQ(table[2 * 0x71 + 1], 6.0f);
  EXPECT_EQ(table[30], std::ldexp(-6.0f, -127));
  EXPECT_EQ(table[31], 0.0f);
  EXPECT_EQ(Ue8m0ToF32(127), 1.0f);
  EXPECT_TRUE(std::isnan(Ue8m0ToF32(255)));
}

// y = x W^T with FP4 weights equals, bit for bit, the same product with an F32 weight holding the
// decoded values (decode and panel kernels, any M, any thread count), and the double twin
// within float rounding.
TEST(Fp4Test, MatMulIsTheF32ProductOfTheDecodedValues) {
  testing::ForEachTarget([] {
    const int64_t N = 70, K = 320;
    Fp4Weight w = MakeFp4(N, K, 3);
    std::vector<float> dense(N * K);
    for (int64_t n = 0; n < N; ++n) DequantizeRow(w.view, n, 0, K, &dense[n * K]);
    const WeightView f32{.dtype = DType::kF32, .rows = N, .cols = K, .data = dense.data()};
    for (int64_t M : {1, 3, 8, 9, 33}) {
      const std::vector<float> x = testing::RandomVector(M * K, 11);
      std::vector<float> y(M * N), want(M * N), ref(M * N);
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        MatMul({.x = x.data(), .num_rows = M, .w = w.view, .y = y.data()}, pool);
        MatMul({.x = x.data(), .num_rows = M, .w = f32, .y = want.data()}, pool);
        EXPECT_EQ(y, want) << "M " << M << " threads " << threads;
      }
      MatMulReference({.x = x.data(), .num_rows = M, .w = w.view, .y = ref.data()});
      for (int64_t i = 0; i < M * N; ++i) ASSERT_NEAR(y[i], ref[i], 1e-4 * (1 + std::abs(ref[i])));
      // Row m alone gives the bits it gets in the batch.
      std::vector<float> alone(N);
      ThreadPool pool(2);
      MatMul({.x = x.data() + (M - 1) * K, .num_rows = 1, .w = w.view, .y = alone.data()}, pool);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), y.begin() + (M - 1) * N)) << M;
    }
  });
}

TEST(Fp4Test, GroupedMlpWithFp4ExpertsEqualsF32ExpertsOfTheDecodedValues) {
  const int64_t H = 64, F = 96;
  std::vector<Fp4Weight> fp4;
  std::vector<std::vector<float>> dense;
  std::vector<ExpertMlpWeights> e4(2), e32(2);
  for (int g = 0; g < 2; ++g) {
    for (int m = 0; m < 3; ++m) {
      const int64_t n = m == 2 ? H : F, k = m == 2 ? F : H;
      fp4.push_back(MakeFp4(n, k, 20 + 3 * g + m));
      dense.emplace_back(n * k);
    }
  }
  for (size_t i = 0; i < fp4.size(); ++i)
    for (int64_t n = 0; n < fp4[i].view.rows; ++n)
      DequantizeRow(fp4[i].view, n, 0, fp4[i].view.cols, &dense[i][n * fp4[i].view.cols]);
  auto f32 = [&](size_t i) {
    return WeightView{.dtype = DType::kF32,
                      .rows = fp4[i].view.rows,
                      .cols = fp4[i].view.cols,
                      .data = dense[i].data()};
  };
  for (int g = 0; g < 2; ++g) {
    e4[g] = {fp4[3 * g].view, fp4[3 * g + 1].view, fp4[3 * g + 2].view};
    e32[g] = {f32(3 * g), f32(3 * g + 1), f32(3 * g + 2)};
  }
  const int64_t offsets[3] = {0, 3, 14};
  const std::vector<float> x = testing::RandomVector(14 * H, 5);
  std::vector<float> h(14 * F), out4(14 * H), out32(14 * H);
  ThreadPool pool(2);
  GroupedMlp({.num_groups = 2,
              .experts = e4.data(),
              .offsets = offsets,
              .x = x.data(),
              .h = h.data(),
              .out = out4.data()},
             pool);
  GroupedMlp({.num_groups = 2,
              .experts = e32.data(),
              .offsets = offsets,
              .x = x.data(),
              .h = h.data(),
              .out = out32.data()},
             pool);
  EXPECT_EQ(out4, out32);
}

}  // namespace
}  // namespace epserve::kernels
