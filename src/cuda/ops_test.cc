// The small device ops against their CPU twins (kernels/ops.h, kernels::DequantizeRow, the
// cache's bf16 rounding, LocalExperts' gather and combine loops) on random inputs.
#include "cuda/ops.h"

#include <gtest/gtest.h>

#include <cmath>

#include "cuda/test_util.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace epserve::cuda {
namespace {

using testing::MakeTestWeight;
using testing::RandomFloats;
using testing::TestWeight;
using testing::ToDevice;
using testing::ToHost;

// f32 with one rounding per step against the double-accumulating twins: a few ulps of the
// row's scale. 1e-5 relative to the largest |value| leaves room for sums of 7168 squares.
constexpr double kTol = 1e-5;

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  const double scale = MaxAbs(want) + 1e-30;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << "at " << i;
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]) / scale);
  }
  EXPECT_LE(worst, tol);
}

TEST(CudaOpsTest, RmsNormMatchesTwin) {
  EPSERVE_REQUIRE_GPU();
  for (int64_t n : {16, 512, 1536, 7168}) {
    const int64_t rows = 5, stride = n + 3;
    auto x = RandomFloats(rows * stride, n, 2.0f);
    auto w = RandomFloats(n, n + 1);
    std::vector<float> want(rows * n);
    for (int64_t r = 0; r < rows; ++r)
      kernels::RmsNormReference(&x[r * stride], w.data(), n, 1e-6f, &want[r * n]);
    DeviceBuffer dx = ToDevice(x), dw = ToDevice(w), dout;
    ASSERT_TRUE(dout.Allocate(rows * n * 4, "out").ok());
    ASSERT_TRUE(RmsNorm({.x = dx.as<float>(),
                         .x_stride = stride,
                         .rows = rows,
                         .n = n,
                         .weight = dw.as<float>(),
                         .eps = 1e-6f,
                         .out = dout.as<float>()},
                        nullptr)
                    .ok());
    ExpectClose(ToHost<float>(dout, rows * n), want, kTol);
  }
}

TEST(CudaOpsTest, SiluMulAndAddMatchTwins) {
  EPSERVE_REQUIRE_GPU();
  const int64_t n = 3 * 2048 + 5;
  auto g = RandomFloats(n, 1, 4.0f), u = RandomFloats(n, 2);
  std::vector<float> want(n);
  kernels::SiluMulReference(g.data(), u.data(), n, want.data());
  DeviceBuffer dg = ToDevice(g), du = ToDevice(u);
  ASSERT_TRUE(SiluMul(dg.as<float>(), du.as<float>(), n, dg.as<float>(), nullptr).ok());
  ExpectClose(ToHost<float>(dg, n), want, 1e-6);
  for (int64_t i = 0; i < n; ++i) want[i] += u[i];
  ASSERT_TRUE(Add(du.as<float>(), n, dg.as<float>(), nullptr).ok());
  ExpectClose(ToHost<float>(dg, n), want, 1e-6);
}

TEST(CudaOpsTest, RopeMatchesTwinPerHeadAndPosition) {
  EPSERVE_REQUIRE_GPU();
  const int R = 64, heads = 3, tokens = 4, stride = 192;  // q rows: [nope 128 | pe 64] per head
  auto x = RandomFloats(tokens * heads * stride, 7);
  std::vector<int64_t> pos = {0, 5, 17, 4000};
  std::vector<float> table(4001 * R);
  for (int64_t p = 0; p <= 4000; ++p)
    for (int i = 0; i < R / 2; ++i) {
      const double a = p * std::pow(10000.0, -2.0 * i / R);
      table[p * R + 2 * i] = static_cast<float>(std::cos(a));
      table[p * R + 2 * i + 1] = static_cast<float>(std::sin(a));
    }
  std::vector<float> want = x;
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h)
      kernels::ApplyRopeReference(&want[(t * heads + h) * stride + 128], &table[pos[t] * R], R);
  DeviceBuffer dx = ToDevice(x), dp = ToDevice(pos), dt = ToDevice(table);
  ASSERT_TRUE(Rope({.x = dx.as<float>() + 128,
                    .rows = tokens * heads,
                    .row_stride = stride,
                    .rows_per_position = heads,
                    .positions = dp.as<int64_t>(),
                    .table = dt.as<float>(),
                    .rope_dim = R},
                   nullptr)
                  .ok());
  ExpectClose(ToHost<float>(dx, x.size()), want, 1e-6);
}

TEST(CudaOpsTest, EmbedRowsDequantizeLikeTheHost) {
  EPSERVE_REQUIRE_GPU();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    TestWeight w;
    MakeTestWeight(dtype, 300, 200, 11, &w);
    std::vector<int32_t> tokens = {0, 299, 128, 127, 5, 5};
    std::vector<float> want(tokens.size() * 200);
    for (size_t t = 0; t < tokens.size(); ++t)
      kernels::DequantizeRow(w.host, tokens[t], 0, 200, &want[t * 200]);
    DeviceBuffer dtok = ToDevice(tokens), dout;
    ASSERT_TRUE(dout.Allocate(static_cast<int64_t>(want.size()) * 4, "out").ok());
    ASSERT_TRUE(EmbedRows(w.device, dtok.as<int32_t>(), static_cast<int64_t>(tokens.size()),
                          dout.as<float>(), nullptr)
                    .ok());
    EXPECT_EQ(ToHost<float>(dout, want.size()), want) << DTypeName(dtype);  // bit-exact
  }
}

TEST(CudaOpsTest, KvWriteRoundsLikeTheHostCache) {
  EPSERVE_REQUIRE_GPU();
  const int width = 576, tokens = 3;
  const int64_t block_size = 16, blocks = 4, block_stride = 2 * block_size * width;  // 2 layers
  auto rows = RandomFloats(tokens * width, 3);
  rows[7] = NAN;
  std::vector<int32_t> block = {2, 0, 3};
  std::vector<int64_t> pos = {33, 1, 63};
  for (bool bf16 : {false, true}) {
    const int64_t bytes = blocks * block_stride * (bf16 ? 2 : 4);
    std::vector<uint8_t> want(bytes, 0);
    for (int t = 0; t < tokens; ++t)
      for (int c = 0; c < width; ++c) {
        const int64_t at = block[t] * block_stride + (pos[t] % block_size) * width + c;
        if (bf16)
          reinterpret_cast<uint16_t*>(want.data())[at] = F32ToBf16(rows[t * width + c]);
        else
          reinterpret_cast<float*>(want.data())[at] = rows[t * width + c];
      }
    DeviceBuffer dr = ToDevice(rows), db = ToDevice(block), dp = ToDevice(pos), dc;
    ASSERT_TRUE(dc.Allocate(bytes, "cache").ok());
    ASSERT_EQ(cudaMemset(dc.data(), 0, bytes), cudaSuccess);
    ASSERT_TRUE(KvWrite({.rows = dr.as<float>(),
                         .num_tokens = tokens,
                         .width = width,
                         .token_block = db.as<int32_t>(),
                         .token_pos = dp.as<int64_t>(),
                         .cache = dc.data(),
                         .block_stride = block_stride,
                         .block_size = block_size,
                         .cache_bf16 = bf16},
                        nullptr)
                    .ok());
    EXPECT_TRUE(ToHost<uint8_t>(dc, bytes) == want) << (bf16 ? "bf16" : "f32");
  }
}

TEST(CudaOpsTest, GatherAndCombineMatchTheLocalExpertLoops) {
  EPSERVE_REQUIRE_GPU();
  const int64_t T = 5, K = 3, H = 130;
  auto x = RandomFloats(T * H, 4), w = RandomFloats(T * K, 5);
  // Pair i goes to packed row pair_row[i] (a permutation; one pair dropped with -1).
  std::vector<int64_t> pair_row = {4, 0, 7, 1, 2, 13, 3, 5, 6, 8, 9, -1, 10, 11, 12};
  std::vector<float> packed(14 * H, 0.0f);
  for (int64_t i = 0; i < T * K; ++i)
    if (pair_row[i] >= 0) std::copy(&x[(i / K) * H], &x[(i / K) * H + H], &packed[pair_row[i] * H]);
  auto y = RandomFloats(14 * H, 6), out = RandomFloats(T * H, 8);
  std::vector<float> want = out;
  for (int64_t i = 0; i < T * K; ++i)
    if (pair_row[i] >= 0) kernels::Axpy(w[i], &y[pair_row[i] * H], H, &want[(i / K) * H]);
  DeviceBuffer dx = ToDevice(x), dpr = ToDevice(pair_row), dpk, dy = ToDevice(y), dw = ToDevice(w),
               dout = ToDevice(out);
  ASSERT_TRUE(dpk.Allocate(14 * H * 4, "packed").ok());
  ASSERT_EQ(cudaMemset(dpk.data(), 0, 14 * H * 4), cudaSuccess);
  ASSERT_TRUE(
      GatherRows(dx.as<float>(), dpr.as<int64_t>(), T * K, K, H, dpk.as<float>(), nullptr).ok());
  EXPECT_EQ(ToHost<float>(dpk, packed.size()), packed);
  ASSERT_TRUE(
      Combine(dy.as<float>(), dpr.as<int64_t>(), dw.as<float>(), T, K, H, dout.as<float>(), nullptr)
          .ok());
  ExpectClose(ToHost<float>(dout, want.size()), want, 1e-6);
}

}  // namespace
}  // namespace epserve::cuda
