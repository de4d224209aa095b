#include "kernels/matmul_i8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "base/aligned_vector.h"
#include "kernels/grouped_gemm.h"
#include "kernels/matmul.h"
#include "kernels/test_util.h"

namespace epserve::kernels {
namespace {

using testing::MakeWeight;
using testing::RandomVector;
using testing::TestWeight;

struct PackedWeight {
  AlignedVector<uint8_t> data;
  AlignedVector<float> scale;
  WeightView view;
};
PackedWeight Pack(const WeightView& w) {
  PackedWeight p;
  const WeightView shape = I8PackedShape(w);
  p.data.resize(shape.DataBytes());
  p.scale.resize(shape.ScaleBytes() / sizeof(float));
  p.view = PackWeightI8(w, p.data.data(), p.scale.data());
  return p;
}

std::vector<float> Dequantized(const WeightView& w) {
  std::vector<float> out(w.rows * w.cols);
  for (int64_t r = 0; r < w.rows; ++r) DequantizeRow(w, r, 0, w.cols, out.data() + r * w.cols);
  return out;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

class I8Test : public ::testing::TestWithParam<DType> {};

// Every element is within half a step of its block's scale, the scale is the block's largest
// |value| / 127, and padding (rows past N, columns past K) packs to zero.
TEST_P(I8Test, PackingRoundsEveryElementToItsBlockScale) {
  const int64_t N = 37, K = 300;
  const TestWeight w = MakeWeight(GetParam(), N, K, 5);
  const PackedWeight p = Pack(w.view);
  ASSERT_EQ(p.view.dtype, DType::kI8Packed);
  ASSERT_EQ(p.view.I8Groups(), 3);
  ASSERT_EQ(p.view.ScaleCols(), 3);
  const std::vector<float> exact = Dequantized(w.view);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t b = 0; b < 3; ++b) {
      float amax = 0;
      for (int64_t k = b * 128; k < std::min<int64_t>(K, b * 128 + 128); ++k)
        amax = std::max(amax, std::fabs(exact[n * K + k]));
      const float s = p.view.scale[((n / 16) * 3 + b) * 16 + n % 16];
      ASSERT_EQ(s, amax / 127.0f) << "row " << n << " block " << b;
      for (int64_t k = b * 128; k < std::min<int64_t>(K, b * 128 + 128); ++k)
        ASSERT_LE(std::fabs(I8PackedValue(p.view, n, k) - exact[n * K + k]), 0.5001f * s)
            << n << "," << k;
    }
  }
  for (int64_t k = K; k < 384; ++k) EXPECT_EQ(I8PackedValue(p.view, 0, k), 0.0f);
  for (int64_t n = N; n < 48; ++n) EXPECT_EQ(I8PackedValue(p.view, n, 0), 0.0f);
}

TEST(I8QuantizeTest, VectorAndScalarAgreeBitForBit) {
  const int64_t M = 5, K = 300, stride = 310;
  std::vector<float> x = RandomVector(M * stride, 9);
  for (int64_t k = 128; k < 256; ++k) x[1 * stride + k] = 0.0f;  // a zero block
  x[2 * stride + 7] = std::numeric_limits<float>::quiet_NaN();   // non-finite
  x[3 * stride + 200] = std::numeric_limits<float>::infinity();
  for (int64_t k = 0; k < 128; ++k)
    x[4 * stride + k] = 1e-42f * static_cast<float>(k % 3);  // denormal
  // Row 0, block 2: scale exactly 1, halves round to even.
  for (int64_t k = 256; k < 300; ++k) x[k] = 0.0f;
  x[256] = 127.0f, x[257] = 0.5f, x[258] = 1.5f, x[259] = 2.5f, x[260] = -2.5f, x[261] = -126.5f;
  QuantizedRows v, s;
  QuantizeRows(x.data(), M, K, stride, v);
  QuantizeRowsScalar(x.data(), M, K, stride, s);
  ASSERT_EQ(v.blocks, 3);
  for (int64_t i = 0; i < M * 3; ++i) {
    EXPECT_TRUE(SameBits(v.scale[i], s.scale[i]) ||
                (std::isnan(v.scale[i]) && std::isnan(s.scale[i])))
        << i;
    EXPECT_EQ(v.sum[i], s.sum[i]) << i;
  }
  for (int64_t i = 0; i < M * 384; ++i) ASSERT_EQ(v.q[i], s.q[i]) << i;
  EXPECT_EQ(s.scale[1 * 3 + 1], 0.0f);
  EXPECT_TRUE(std::isnan(s.scale[2 * 3 + 0]));
  EXPECT_TRUE(std::isnan(s.scale[3 * 3 + 1]));
  EXPECT_EQ(s.q[0 * 384 + 300], 0);  // past K
  EXPECT_EQ(s.scale[2], 1.0f);
  const int8_t halves[] = {127, 0, 2, 2, -2, -126};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(s.q[256 + i], halves[i]) << i;
  int32_t sum = 0;
  for (int64_t k = 0; k < 128; ++k) {
    sum += s.q[k];
    EXPECT_LE(std::fabs(s.q[k] * s.scale[0] - x[k]), 0.5001f * s.scale[0]);
  }
  EXPECT_EQ(sum, s.sum[0]);
}

// The kernel (AVX512-VNNI where the CPU has it) against its scalar twin, bit for bit, for
// every tile shape (M = 1..4 one group at a time, M = 1 on its two-chain tile; larger M in
// tiles of 1..4 rows and 1 or 2 row groups), partial groups and blocks, row ranges
// and accumulate; and against the exact product within the bound the two roundings allow.
TEST_P(I8Test, KernelMatchesTwinBitForBitAndExactWithinBound) {
  const int64_t N = 72, K = 300;
  const TestWeight w = MakeWeight(GetParam(), N, K, 11);
  const PackedWeight p = Pack(w.view);
  const std::vector<float> exact_w = Dequantized(w.view);
  for (int64_t M : {1, 2, 3, 4, 5, 8, 9, 17}) {
    SCOPED_TRACE(M);
    const std::vector<float> x = RandomVector(M * K, 20 + M);
    QuantizedRows q;
    QuantizeRows(x.data(), M, K, K, q);
    for (bool acc : {false, true}) {
      std::vector<float> y(M * N, 0.5f), twin(M * N, 0.5f);
      for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 16}, {16, 47}, {48, 72}}) {
        I8MatMulRows({.x = q.View(), .w = p.view, .y = y.data(), .y_stride = N, .accumulate = acc},
                     b, e);
        I8MatMulRowsScalar(
            {.x = q.View(), .w = p.view, .y = twin.data(), .y_stride = N, .accumulate = acc}, b, e);
      }
      for (int64_t i = 0; i < M * N; ++i) {
        if (i % N == 47) continue;  // no range covered it
        ASSERT_TRUE(SameBits(y[i], twin[i])) << i << ": " << y[i] << " vs " << twin[i];
      }
      if (acc) continue;
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
          if (n == 47) continue;
          double ref = 0, bound = 0;
          for (int64_t b = 0; b < 3; ++b) {
            const float sx = q.scale[m * 3 + b],
                        sw = p.view.scale[((n / 16) * 3 + b) * 16 + n % 16];
            for (int64_t k = b * 128; k < std::min<int64_t>(K, b * 128 + 128); ++k) {
              const double xv = x[m * K + k], wv = exact_w[n * K + k];
              ref += xv * wv;
              bound += 0.5 * sw * std::fabs(xv) + 0.5 * sx * std::fabs(wv) + 0.25 * sx * sw;
            }
          }
          ASSERT_LE(std::fabs(y[m * N + n] - ref), bound * 1.001 + 1e-5) << m << "," << n;
        }
      }
    }
  }
}

// MatMulBatch with int8 weights: the twin's result for any thread count, with two problems
// sharing their input and one reading another; MatMulReference gives the same.
TEST_P(I8Test, MatMulBatchIsTheTwinForAnyThreadCount) {
  const int64_t K = 256;
  const TestWeight w1 = MakeWeight(GetParam(), 200, K, 1), w2 = MakeWeight(GetParam(), 40, K, 2);
  const PackedWeight p1 = Pack(w1.view), p2 = Pack(w2.view);
  for (int64_t M : {1, 6, 40}) {
    SCOPED_TRACE(M);
    const std::vector<float> x = RandomVector(M * K, 3), x2 = RandomVector(M * K, 4);
    std::vector<float> r1(M * 200), r2(M * 40), r3(M * 40);
    MatMulReference({.x = x.data(), .num_rows = M, .w = p1.view, .y = r1.data()});
    MatMulReference({.x = x.data(), .num_rows = M, .w = p2.view, .y = r2.data()});
    MatMulReference({.x = x2.data(), .num_rows = M, .w = p2.view, .y = r3.data()});
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      std::vector<float> y1(M * 200, 1.0f), y2(M * 40, 2.0f), y3(M * 40, 3.0f);
      const MatMulArgs batch[] = {{.x = x.data(), .num_rows = M, .w = p1.view, .y = y1.data()},
                                  {.x = x.data(), .num_rows = M, .w = p2.view, .y = y2.data()},
                                  {.x = x2.data(), .num_rows = M, .w = p2.view, .y = y3.data()}};
      MatMulBatch(batch, pool);
      for (int64_t i = 0; i < M * 200; ++i)
        ASSERT_TRUE(SameBits(y1[i], r1[i])) << threads << " " << i;
      for (int64_t i = 0; i < M * 40; ++i)
        ASSERT_TRUE(SameBits(y2[i], r2[i])) << threads << " " << i;
      for (int64_t i = 0; i < M * 40; ++i)
        ASSERT_TRUE(SameBits(y3[i], r3[i])) << threads << " " << i;
    }
  }
}

// The grouped expert MLP on int8 weights: bit-identical for any thread count, and equal to
// its reference (SiLU in double there, so the int8 quantization of h may move by a step).
TEST_P(I8Test, GroupedMlpMatchesReferenceForAnyThreadCount) {
  const int64_t hidden = 300, inter = 72;
  const std::vector<int64_t> rows = {1, 0, 3, 8, 9, 140};
  std::vector<TestWeight> store;
  std::vector<PackedWeight> packed;
  std::vector<ExpertMlpWeights> experts;
  for (size_t g = 0; g < rows.size(); ++g) {
    store.push_back(MakeWeight(GetParam(), inter, hidden, 10 + g));
    store.push_back(MakeWeight(GetParam(), inter, hidden, 20 + g));
    store.push_back(MakeWeight(GetParam(), hidden, inter, 30 + g));
  }
  for (const TestWeight& t : store) packed.push_back(Pack(t.view));
  for (size_t g = 0; g < rows.size(); ++g)
    experts.push_back({packed[3 * g].view, packed[3 * g + 1].view, packed[3 * g + 2].view});
  std::vector<int64_t> offsets = {0};
  for (int64_t r : rows) offsets.push_back(offsets.back() + r);
  const int64_t total = offsets.back();
  std::vector<float> x = RandomVector(total * hidden, 3);
  for (auto& v : x) v *= 0.05f;
  std::vector<float> h(total * inter), ref(total * hidden);
  GroupedMlpArgs args{.num_groups = static_cast<int>(rows.size()),
                      .experts = experts.data(),
                      .offsets = offsets.data(),
                      .x = x.data(),
                      .h = h.data(),
                      .out = ref.data()};
  GroupedMlpReference(args);
  double max_ref = 0;
  for (float v : ref) max_ref = std::max(max_ref, std::fabs(static_cast<double>(v)));
  std::vector<float> first;
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<float> y(total * hidden, -1.0f);
    args.out = y.data();
    GroupedMlp(args, pool);
    for (int64_t i = 0; i < total * hidden; ++i)
      ASSERT_NEAR(y[i], ref[i], 2e-2 * max_ref) << threads << " " << i;
    if (first.empty()) first = y;
    for (int64_t i = 0; i < total * hidden; ++i)
      ASSERT_TRUE(SameBits(y[i], first[i])) << threads << " " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, I8Test,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF8E4M3),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return testing::DTypeTestName(info.param);
                         });

TEST(I8Test, RowSliceStartsOnAGroup) {
  const TestWeight w = MakeWeight(DType::kBF16, 64, 256, 1);
  const PackedWeight p = Pack(w.view);
  const WeightView s = p.view.RowSlice(32, 20);
  EXPECT_EQ(s.rows, 20);
  for (int64_t r = 0; r < 20; ++r)
    for (int64_t k = 0; k < 256; k += 37)
      EXPECT_EQ(I8PackedValue(s, r, k), I8PackedValue(p.view, 32 + r, k));
  EXPECT_DEATH(p.view.RowSlice(8, 8), "not a multiple of 16");
}

}  // namespace
}  // namespace epserve::kernels
