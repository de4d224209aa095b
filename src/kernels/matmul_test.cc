#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/test_util.h"

namespace epserve::kernels {
namespace {

using testing::ForEachTarget;
using testing::MakeWeight;
using testing::RandomVector;
using testing::TestWeight;

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

class MatMulTest : public ::testing::TestWithParam<DType> {};

// Decode (M <= 8) and panel (M > 8: one or several blocks of x rows, partial tiles) paths,
// ragged K (vector and FP8-block tails) and N (several panels, partial tiles), on every SIMD
// target.
TEST_P(MatMulTest, MatchesReferenceAndIsThreadCountInvariant) {
  ThreadPool one(1), two(2), three(3);
  ForEachTarget([&] {
    for (int64_t m : {1, 2, 3, 5, 8, 9, 17, 30, 40, 80}) {
      for (auto [n, k] :
           std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {130, 300}, {300, 520}, {37, 1100}}) {
        TestWeight w = MakeWeight(GetParam(), n, k, static_cast<uint32_t>(n * 7 + k + m));
        std::vector<float> x = RandomVector(m * k, static_cast<uint32_t>(m));
        std::vector<float> ref(m * n), y1(m * n), y2(m * n), y3(m * n);
        MatMulArgs args{.x = x.data(), .num_rows = m, .w = w.view, .y = ref.data()};
        MatMulReference(args);
        args.y = y1.data();
        MatMul(args, one);
        args.y = y2.data();
        MatMul(args, two);
        args.y = y3.data();
        MatMul(args, three);
        const double max_ref = MaxAbs(ref);
        for (int64_t i = 0; i < m * n; ++i) {
          ASSERT_NEAR(y1[i], ref[i], 1e-5 * max_ref + 1e-6)
              << m << "x" << n << "x" << k << " @" << i;
          ASSERT_EQ(y1[i], y2[i]) << m << "x" << n << "x" << k << " @" << i;
          ASSERT_EQ(y1[i], y3[i]) << m << "x" << n << "x" << k << " @" << i;
        }
      }
    }
  });
}

TEST_P(MatMulTest, AccumulateAndStrides) {
  ThreadPool pool(2);
  ForEachTarget([&] {
    for (int64_t m : {3, 13}) {
      const int64_t n = 20, k = 140;
      TestWeight w = MakeWeight(GetParam(), n, k, 5);
      std::vector<float> x(m * (k + 4), 0.5f), y(m * (n + 3), 1.0f), ref(m * (n + 3), 1.0f);
      MatMulArgs args{.x = x.data(),
                      .x_stride = k + 4,
                      .num_rows = m,
                      .w = w.view,
                      .y = y.data(),
                      .y_stride = n + 3,
                      .accumulate = true};
      MatMul(args, pool);
      args.y = ref.data();
      MatMulReference(args);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(y[i * (n + 3) + j], ref[i * (n + 3) + j], 1e-3);
        for (int64_t j = n; j < n + 3; ++j)
          EXPECT_EQ(y[i * (n + 3) + j], 1.0f);  // padding untouched
      }
    }
  });
}

TEST_P(MatMulTest, TransposedMatchesReferenceOnUnalignedRowSlices) {
  ThreadPool one(1), two(2);
  TestWeight w = MakeWeight(GetParam(), 300, 600, 9);
  // Rows [70, 70 + 100): crosses a 128-row FP8 tile boundary.
  WeightView slice = w.view.RowSlice(70, 100);
  ForEachTarget([&] {
    for (int64_t m : {1, 2, 3, 4, 5, 12}) {  // direct kernel (M <= 4) and the slab one
      std::vector<float> x(m * 100);
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * i);
      std::vector<float> ref(m * 600), y1(m * 600), y2(m * 600);
      MatMulTArgs args{.x = x.data(), .num_rows = m, .w = slice, .y = ref.data()};
      MatMulTReference(args);
      args.y = y1.data();
      MatMulT(args, one);
      args.y = y2.data();
      MatMulT(args, two);
      const double max_ref = MaxAbs(ref);
      for (size_t i = 0; i < ref.size(); ++i) {
        ASSERT_NEAR(y1[i], ref[i], 1e-5 * max_ref);
        ASSERT_EQ(y1[i], y2[i]);
      }
      // And the plain product over the same slice agrees with dequantizing row by row.
      std::vector<float> ones(m * 600, 1.0f), out(m * 100), out_ref(m * 100);
      MatMulArgs margs{.x = ones.data(), .num_rows = m, .w = slice, .y = out.data()};
      MatMul(margs, two);
      margs.y = out_ref.data();
      MatMulReference(margs);
      for (int64_t i = 0; i < m * 100; ++i)
        ASSERT_NEAR(out[i], out_ref[i], 1e-4 * (1 + std::fabs(out_ref[i])));
    }
  });
}

// A row's result must not depend on how many other rows share the call, whatever M: the
// step's batch, chunked prefill and expert parallelism change those counts, and the FP8 dispatch
// quantizer would turn a last-bit difference into a visible one. Shapes: K with vector and FP8
// block tails, K > 4096 (a panel of few rows), K too long for the panel (streamed per 8 rows);
// M from decode through several x blocks and panels; strided, unaligned x.
TEST_P(MatMulTest, RowResultsDoNotDependOnBatchSize) {
  ThreadPool pool(2);
  ForEachTarget([&] {
    for (auto [n, k] :
         std::vector<std::pair<int64_t, int64_t>>{{70, 1100}, {130, 300}, {37, 5000}, {3, 66000}}) {
      std::vector<int64_t> ms;
      for (int64_t m = 2; m <= 24; ++m) ms.push_back(m);
      for (int64_t m : {33, 70}) ms.push_back(m);
      if (k > 5000) ms = {9, 20};
      const int64_t max_m = ms.back(), x_stride = k + 3;
      TestWeight w = MakeWeight(GetParam(), n, k, static_cast<uint32_t>(n + 3 * k));
      std::vector<float> x = RandomVector(max_m * x_stride, 11);
      std::vector<float> single(max_m * n);
      for (int64_t i = 0; i < max_m; ++i)
        MatMul(
            {.x = x.data() + i * x_stride, .num_rows = 1, .w = w.view, .y = single.data() + i * n},
            pool);
      for (int64_t m : ms) {
        std::vector<float> y(m * n);
        MatMul({.x = x.data(), .x_stride = x_stride, .num_rows = m, .w = w.view, .y = y.data()},
               pool);
        for (int64_t i = 0; i < m * n; ++i)
          ASSERT_EQ(y[i], single[i]) << "M=" << m << " " << n << "x" << k << " @" << i;
      }
      if (k > 2000) continue;
      // MatMulT (x [M, n] times W [n, k]): the direct kernel (M <= 4) and the slab kernel.
      std::vector<float> single_t(max_m * k);
      for (int64_t i = 0; i < max_m; ++i)
        MatMulT({.x = x.data() + i * n, .num_rows = 1, .w = w.view, .y = single_t.data() + i * k},
                pool);
      for (int64_t m : ms) {
        std::vector<float> y(m * k);
        MatMulT({.x = x.data(), .num_rows = m, .w = w.view, .y = y.data()}, pool);
        for (int64_t i = 0; i < m * k; ++i)
          ASSERT_EQ(y[i], single_t[i]) << "MatMulT M=" << m << " " << n << "x" << k << " @" << i;
      }
    }
  });
}

// One parallel loop over several products gives each the bits of its own MatMul / MatMulT
// call, with mixed dtypes and shapes, strided x and y, and an empty product among them.
TEST(MatMulBatchTest, EachProductEqualsItsOwnCall) {
  ThreadPool pool(3);
  ForEachTarget([&] {
    const int64_t m = 3;
    std::vector<TestWeight> ws;
    ws.push_back(MakeWeight(DType::kF8E4M3, 300, 256, 1));
    ws.push_back(MakeWeight(DType::kBF16, 37, 256, 2));
    ws.push_back(MakeWeight(DType::kF32, 130, 256, 3));
    std::vector<float> x = RandomVector(m * 2 * 300, 5);
    std::vector<MatMulArgs> mm;
    std::vector<MatMulTArgs> mt;
    std::vector<std::vector<float>> y_batch, yt_batch;
    for (size_t i = 0; i < ws.size(); ++i) {
      y_batch.emplace_back(m * 2 * ws[i].view.rows, -1.0f);
      yt_batch.emplace_back(m * 2 * ws[i].view.cols, -1.0f);
      mm.push_back({.x = x.data() + i,
                    .x_stride = 2 * 256,
                    .num_rows = m,
                    .w = ws[i].view,
                    .y = y_batch[i].data(),
                    .y_stride = 2 * ws[i].view.rows});
      mt.push_back({.x = x.data() + i,
                    .x_stride = 2 * ws[i].view.rows,
                    .num_rows = m,
                    .w = ws[i].view,
                    .y = yt_batch[i].data(),
                    .y_stride = 2 * ws[i].view.cols});
    }
    mm.push_back({.x = x.data(), .num_rows = 0, .w = ws[0].view, .y = nullptr});
    MatMulBatch(mm, pool);
    MatMulTBatch(mt, pool);
    for (size_t i = 0; i < ws.size(); ++i) {
      std::vector<float> y(y_batch[i].size(), -1.0f), yt(yt_batch[i].size(), -1.0f);
      MatMulArgs a = mm[i];
      a.y = y.data();
      MatMul(a, pool);
      MatMulTArgs at = mt[i];
      at.y = yt.data();
      MatMulT(at, pool);
      ASSERT_EQ(y, y_batch[i]) << "MatMul product " << i;
      ASSERT_EQ(yt, yt_batch[i]) << "MatMulT product " << i;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, MatMulTest,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF8E4M3),
                         [](const auto& info) { return testing::DTypeTestName(info.param); });

// Every e4m3 code (but the two NaNs) through both paths: row n of W repeats code n, x rows are
// one-hot, so each output is exactly one dequantized weight.
TEST(MatMulFp8Test, EveryCodeDequantizesExactly) {
  const int64_t n = 256, k = 24;
  std::vector<uint8_t> bytes(n * k);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c)
      bytes[r * k + c] = (r & 0x7f) == 0x7f ? 0 : static_cast<uint8_t>(r);
  std::vector<float> scale = {0.5f, 0.25f};  // row tiles 0 and 1
  WeightView w{
      .dtype = DType::kF8E4M3, .rows = n, .cols = k, .data = bytes.data(), .scale = scale.data()};
  ThreadPool pool(2);
  ForEachTarget([&] {
    for (int64_t m : {1, 7, 11}) {
      std::vector<float> x(m * k, 0.0f), y(m * n);
      for (int64_t i = 0; i < m; ++i) x[i * k + (i * 5) % k] = 1.0f;
      MatMul({.x = x.data(), .num_rows = m, .w = w, .y = y.data()}, pool);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t r = 0; r < n; ++r)
          ASSERT_EQ(y[i * n + r], Fp8E4M3ToF32(bytes[r * k]) * scale[r / 128])
              << "m=" << m << " code " << r;
    }
  });
}

TEST(DequantizeTest, Fp8UsesTheTileScale) {
  TestWeight w = MakeWeight(DType::kF8E4M3, 260, 300, 1);
  float v;
  DequantizeRow(w.view, 259, 299, 1, &v);
  const int64_t tile = (259 / 128) * w.view.ScaleCols() + 299 / 128;
  EXPECT_EQ(v, Fp8E4M3ToF32(w.bytes[259 * 300 + 299]) * w.scale[tile]);
}

}  // namespace
}  // namespace epserve::kernels
