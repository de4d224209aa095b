#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace epserve::kernels {
namespace {

struct TestWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> scale;
  WeightView view;
};

TestWeight MakeWeight(DType dtype, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  TestWeight t;
  t.bytes.resize(n * k * DTypeSize(dtype));
  for (int64_t i = 0; i < n * k; ++i) {
    float v = dist(rng);
    if (dtype == DType::kF32) std::memcpy(&t.bytes[i * 4], &v, 4);
    if (dtype == DType::kBF16) {
      uint16_t b = F32ToBf16(v);
      std::memcpy(&t.bytes[i * 2], &b, 2);
    }
    if (dtype == DType::kF8E4M3) t.bytes[i] = F32ToFp8E4M3(v * 50.0f);
  }
  t.view = WeightView{.dtype = dtype, .rows = n, .cols = k, .data = t.bytes.data()};
  if (dtype == DType::kF8E4M3) {
    t.scale.resize(t.view.ScaleRows() * t.view.ScaleCols());
    for (size_t i = 0; i < t.scale.size(); ++i) t.scale[i] = 0.01f * (1 + i % 5);
    t.view.scale = t.scale.data();
  }
  return t;
}

class MatMulTest : public ::testing::TestWithParam<DType> {};

TEST_P(MatMulTest, MatchesReferenceAndIsThreadCountInvariant) {
  ThreadPool one(1), two(2), three(3);
  for (int64_t m : {1, 3, 8, 17}) {
    for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {130, 300}, {256, 1100}}) {
      TestWeight w = MakeWeight(GetParam(), n, k, static_cast<uint32_t>(n * 7 + k + m));
      std::vector<float> x(m * k);
      std::mt19937 rng(m);
      std::normal_distribution<float> dist;
      for (auto& v : x) v = dist(rng);
      std::vector<float> ref(m * n), y1(m * n), y2(m * n), y3(m * n);
      MatMulArgs args{.x = x.data(), .num_rows = m, .w = w.view, .y = ref.data()};
      MatMulReference(args);
      args.y = y1.data();
      MatMul(args, one);
      args.y = y2.data();
      MatMul(args, two);
      args.y = y3.data();
      MatMul(args, three);
      double max_ref = 0;
      for (float v : ref) max_ref = std::max(max_ref, std::fabs(static_cast<double>(v)));
      for (int64_t i = 0; i < m * n; ++i) {
        ASSERT_NEAR(y1[i], ref[i], 1e-5 * max_ref + 1e-6) << m << "x" << n << "x" << k << " @" << i;
        ASSERT_EQ(y1[i], y2[i]);
        ASSERT_EQ(y1[i], y3[i]);
      }
    }
  }
}

TEST_P(MatMulTest, AccumulateAndStrides) {
  ThreadPool pool(2);
  const int64_t m = 3, n = 20, k = 140;
  TestWeight w = MakeWeight(GetParam(), n, k, 5);
  std::vector<float> x(m * (k + 4), 0.5f), y(m * (n + 3), 1.0f), ref(m * (n + 3), 1.0f);
  MatMulArgs args{.x = x.data(), .x_stride = k + 4, .num_rows = m, .w = w.view, .y = y.data(), .y_stride = n + 3,
                  .accumulate = true};
  MatMul(args, pool);
  args.y = ref.data();
  MatMulReference(args);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(y[i * (n + 3) + j], ref[i * (n + 3) + j], 1e-3);
    for (int64_t j = n; j < n + 3; ++j) EXPECT_EQ(y[i * (n + 3) + j], 1.0f);  // padding untouched
  }
}

TEST_P(MatMulTest, TransposedMatchesReferenceOnUnalignedRowSlices) {
  ThreadPool one(1), two(2);
  TestWeight w = MakeWeight(GetParam(), 300, 600, 9);
  // Rows [70, 70 + 100): crosses a 128-row FP8 tile boundary.
  WeightView slice = w.view.RowSlice(70, 100);
  for (int64_t m : {1, 5}) {
    std::vector<float> x(m * 100);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * i);
    std::vector<float> ref(m * 600), y1(m * 600), y2(m * 600);
    MatMulTArgs args{.x = x.data(), .num_rows = m, .w = slice, .y = ref.data()};
    MatMulTReference(args);
    args.y = y1.data();
    MatMulT(args, one);
    args.y = y2.data();
    MatMulT(args, two);
    double max_ref = 0;
    for (float v : ref) max_ref = std::max(max_ref, std::fabs(static_cast<double>(v)));
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_NEAR(y1[i], ref[i], 1e-5 * max_ref);
      ASSERT_EQ(y1[i], y2[i]);
    }
    // And the plain product over the same slice agrees with dequantizing row by row.
    std::vector<float> xs(600, 1.0f), out(100), out_ref(100);
    MatMulArgs margs{.x = xs.data(), .num_rows = 1, .w = slice, .y = out.data()};
    MatMul(margs, two);
    margs.y = out_ref.data();
    MatMulReference(margs);
    for (int i = 0; i < 100; ++i) ASSERT_NEAR(out[i], out_ref[i], 1e-4 * (1 + std::fabs(out_ref[i])));
  }
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, MatMulTest, ::testing::Values(DType::kF32, DType::kBF16, DType::kF8E4M3),
                         [](const auto& info) { return std::string(DTypeName(info.param)).substr(0, 2) == "F8" ? std::string("FP8") : std::string(DTypeName(info.param)); });

TEST(DequantizeTest, Fp8UsesTheTileScale) {
  TestWeight w = MakeWeight(DType::kF8E4M3, 260, 300, 1);
  float v;
  DequantizeRow(w.view, 259, 299, 1, &v);
  const int64_t tile = (259 / 128) * w.view.ScaleCols() + 299 / 128;
  EXPECT_EQ(v, Fp8E4M3ToF32(w.bytes[259 * 300 + 299]) * w.scale[tile]);
}

}  // namespace
}  // namespace epserve::kernels
