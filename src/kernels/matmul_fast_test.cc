// The fast path (Compute::kFast: the AMX or the AVX512-BF16 kernel, whichever this CPU runs)
// against its scalar twin, its invariances (row split, thread count, other rows in the call)
// and its stated error against the exact product; and the AVX512-BF16 kernel by itself where
// the CPU has it (on an AMX machine MatMul runs the AMX one). On a CPU with neither the kernels
// cannot run: those tests report themselves skipped and the fallback test checks that kFast
// then gives exactly the kExact results.
#include "kernels/matmul_fast.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/grouped_gemm.h"
#include "kernels/matmul.h"
#include "kernels/test_util.h"

namespace epserve::kernels {
namespace {

using testing::MakeWeight;
using testing::RandomVector;
using testing::TestWeight;

#define SKIP_WITHOUT_AMX()                                                                   \
  if (!FastMatMulAvailable())                                                                \
  GTEST_SKIP() << "this CPU (or EPSERVE_NO_AMX / EPSERVE_NO_BF16_DOT) has neither AMX-BF16 " \
                  "tiles nor AVX512-BF16: no fast kernel can run here"

class FastMatMulTest : public ::testing::TestWithParam<DType> {};

std::vector<std::pair<int64_t, int64_t>> Shapes() {
  return {{1, 1}, {130, 300}, {300, 520}, {37, 1100}, {64, 1024}, {17, 33}};
}

TEST_P(FastMatMulTest, MatchesTwinAndIsThreadCountInvariant) {
  SKIP_WITHOUT_AMX();
  ThreadPool one(1), two(2), three(3);
  for (int64_t m : {1, 2, 5, 8, 9, 16, 17, 31, 33, 80}) {
    for (auto [n, k] : Shapes()) {
      SCOPED_TRACE(::testing::Message() << m << "x" << n << "x" << k);
      TestWeight w = MakeWeight(GetParam(), n, k, static_cast<uint32_t>(n * 7 + k + m));
      std::vector<float> x = RandomVector(m * k, static_cast<uint32_t>(m + 11));
      std::vector<float> ref(m * n), y1(m * n), y2(m * n), y3(m * n);
      MatMulArgs args{
          .x = x.data(), .num_rows = m, .w = w.view, .y = ref.data(), .compute = Compute::kFast};
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
        // Same bf16 operands; only the f32 summation differs from the twin's double one.
        ASSERT_NEAR(y1[i], ref[i], 2e-5 * max_ref + 1e-6) << "@" << i;
        ASSERT_EQ(y1[i], y2[i]) << "@" << i;
        ASSERT_EQ(y1[i], y3[i]) << "@" << i;
      }
    }
  }
}

// A row's result is the same whichever other rows share the call (EP changes that number).
TEST_P(FastMatMulTest, RowResultDoesNotDependOnOtherRows) {
  SKIP_WITHOUT_AMX();
  ThreadPool pool(2);
  const int64_t n = 300, k = 520, m = 40;
  TestWeight w = MakeWeight(GetParam(), n, k, 3);
  std::vector<float> x = RandomVector(m * k, 4), all(m * n);
  MatMul({.x = x.data(), .num_rows = m, .w = w.view, .y = all.data(), .compute = Compute::kFast},
         pool);
  for (int64_t rows : {1, 3, 8, 16, 17}) {
    for (int64_t first : {int64_t{0}, m - rows}) {
      std::vector<float> part(rows * n);
      MatMul({.x = x.data() + first * k,
              .num_rows = rows,
              .w = w.view,
              .y = part.data(),
              .compute = Compute::kFast},
             pool);
      for (int64_t i = 0; i < rows * n; ++i)
        ASSERT_EQ(part[i], all[first * n + i]) << rows << " rows from " << first << " @" << i;
    }
  }
}

// The stated bound: both operands rounded to bf16 (relative error <= 2^-9 each), so
// |fast - exact| <= (2 * 2^-9 + 2^-18) * sum |x * w| + the f32 summation error.
TEST_P(FastMatMulTest, ErrorAgainstExactIsWithinTheBf16Bound) {
  SKIP_WITHOUT_AMX();
  ThreadPool pool(2);
  const int64_t m = 24, n = 130, k = 1100;
  TestWeight w = MakeWeight(GetParam(), n, k, 9);
  std::vector<float> x = RandomVector(m * k, 10), fast(m * n), exact(m * n);
  MatMulArgs args{.x = x.data(), .num_rows = m, .w = w.view, .y = exact.data()};
  MatMulReference(args);
  args.y = fast.data();
  args.compute = Compute::kFast;
  MatMul(args, pool);
  std::vector<float> row(k);
  double worst = 0;
  for (int64_t j = 0; j < n; ++j) {
    DequantizeRow(w.view, j, 0, k, row.data());
    for (int64_t i = 0; i < m; ++i) {
      double abs_sum = 0;
      for (int64_t t = 0; t < k; ++t)
        abs_sum += std::fabs(static_cast<double>(x[i * k + t]) * row[t]);
      const double err = std::fabs(static_cast<double>(fast[i * n + j]) - exact[i * n + j]);
      const double bound = (2.0 / 512 + 1.0 / (1 << 18)) * abs_sum + 1e-6 * abs_sum;
      ASSERT_LE(err, bound) << i << "," << j;
      worst = std::max(worst, err / abs_sum);
    }
  }
  // The rounding really happened (else the test compares exact with exact).
  EXPECT_GT(worst, 1e-5);
  RecordProperty("worst_error_over_abs_sum", std::to_string(worst));
}

TEST_P(FastMatMulTest, AccumulateAndStrides) {
  SKIP_WITHOUT_AMX();
  ThreadPool pool(2);
  for (int64_t m : {3, 13, 40}) {
    const int64_t n = 20, k = 140;
    TestWeight w = MakeWeight(GetParam(), n, k, 5);
    std::vector<float> x = RandomVector(m * (k + 4), 6), y(m * (n + 3), 1.0f),
                       ref(m * (n + 3), 1.0f);
    MatMulArgs args{.x = x.data(),
                    .x_stride = k + 4,
                    .num_rows = m,
                    .w = w.view,
                    .y = y.data(),
                    .y_stride = n + 3,
                    .accumulate = true,
                    .compute = Compute::kFast};
    MatMul(args, pool);
    args.y = ref.data();
    MatMulReference(args);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(y[i * (n + 3) + j], ref[i * (n + 3) + j], 1e-3);
      for (int64_t j = n; j < n + 3; ++j) EXPECT_EQ(y[i * (n + 3) + j], 1.0f);  // padding untouched
    }
  }
}

TEST_P(FastMatMulTest, GroupedMlpMatchesTwin) {
  SKIP_WITHOUT_AMX();
  ThreadPool pool(2);
  const int64_t hidden = 256, inter = 320;
  std::vector<TestWeight> store;
  std::vector<ExpertMlpWeights> experts;
  for (int g = 0; g < 4; ++g) {
    store.push_back(MakeWeight(GetParam(), inter, hidden, 20 + g));
    store.push_back(MakeWeight(GetParam(), inter, hidden, 30 + g));
    store.push_back(MakeWeight(GetParam(), hidden, inter, 40 + g));
  }
  for (int g = 0; g < 4; ++g)
    experts.push_back({store[3 * g].view, store[3 * g + 1].view, store[3 * g + 2].view});
  const std::vector<int64_t> offsets = {0, 1, 1, 20, 29};
  const int64_t rows = offsets.back();
  std::vector<float> x = RandomVector(rows * hidden, 7);
  for (float& v : x) v *= 0.05f;
  std::vector<float> h(rows * inter), out(rows * hidden), h_ref(rows * inter), ref(rows * hidden);
  GroupedMlpArgs args{.num_groups = 4,
                      .experts = experts.data(),
                      .offsets = offsets.data(),
                      .x = x.data(),
                      .h = h.data(),
                      .out = out.data(),
                      .compute = Compute::kFast};
  GroupedMlp(args, pool);
  args.h = h_ref.data();
  args.out = ref.data();
  GroupedMlpReference(args);
  double max_ref = 0;
  for (float v : ref) max_ref = std::max(max_ref, std::fabs(static_cast<double>(v)));
  // h is rounded to bf16 again before the down projection; a one-ulp difference in a gate/up
  // sum can flip that rounding, so the tolerance is bf16-sized.
  for (int64_t i = 0; i < rows * hidden; ++i) ASSERT_NEAR(out[i], ref[i], 1e-2 * max_ref) << i;
}

// The AVX512-BF16 kernel called directly (whichever kernel MatMul chose): against the twin,
// and each row's result the same for every M (the streaming path for M <= 8, the panel path
// above) and every split of the rows.
TEST_P(FastMatMulTest, Avx512Bf16KernelMatchesTwinForEveryM) {
  if (!DotMatMulSupported()) GTEST_SKIP() << "this CPU has no AVX512-BF16 (VDPBF16PS)";
  for (auto [n, k] : Shapes()) {
    SCOPED_TRACE(::testing::Message() << n << "x" << k);
    const int64_t m_all = 21;
    TestWeight w = MakeWeight(GetParam(), n, k, static_cast<uint32_t>(n * 5 + k));
    std::vector<float> x = RandomVector(m_all * k, static_cast<uint32_t>(k + 3));
    std::vector<float> ref(m_all * n), all(m_all * n);
    MatMulArgs args{.x = x.data(),
                    .x_stride = k,
                    .num_rows = m_all,
                    .w = w.view,
                    .y = ref.data(),
                    .y_stride = n,
                    .compute = Compute::kFast};
    MatMulReference(args);
    args.y = all.data();
    DotMatMulRows(args, 0, n);
    double max_ref = 0;
    for (float v : ref) max_ref = std::max(max_ref, std::fabs(static_cast<double>(v)));
    for (int64_t i = 0; i < m_all * n; ++i)
      ASSERT_NEAR(all[i], ref[i], 2e-5 * max_ref + 1e-6) << "@" << i;
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}) {
      std::vector<float> part(m * n);
      args.num_rows = m;
      args.x = x.data() + (m_all - m) * k;
      args.y = part.data();
      const int64_t split = n / 3;  // two calls: rows [0, split) and [split, n)
      DotMatMulRows(args, 0, split);
      DotMatMulRows(args, split, n);
      for (int64_t i = 0; i < m * n; ++i)
        ASSERT_EQ(part[i], all[(m_all - m) * n + i]) << m << " rows @" << i;
    }
  }
}

// Without a fast kernel kFast must be exactly kExact (MatMul falls back); with one this is the
// skip.
TEST_P(FastMatMulTest, FallsBackToExactWithoutAFastKernel) {
  if (FastMatMulAvailable())
    GTEST_SKIP() << "the " << FastKernelName(FastMatMulKernel()) << " kernel runs here";
  ThreadPool pool(2);
  for (int64_t m : {1, 9, 80}) {
    const int64_t n = 130, k = 300;
    TestWeight w = MakeWeight(GetParam(), n, k, 8);
    std::vector<float> x = RandomVector(m * k, 12), exact(m * n), fast(m * n);
    MatMul({.x = x.data(), .num_rows = m, .w = w.view, .y = exact.data()}, pool);
    MatMul({.x = x.data(), .num_rows = m, .w = w.view, .y = fast.data(), .compute = Compute::kFast},
           pool);
    EXPECT_EQ(exact, fast) << m;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FastMatMulTest,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF8E4M3),
                         [](const auto& info) { return testing::DTypeTestName(info.param); });

}  // namespace
}  // namespace epserve::kernels
