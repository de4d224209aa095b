// The MoE layer's device bookkeeping: ExpertLayout against its twin LayoutExpertMajor (equal as
// sets: the same offsets, each expert's packed rows holding exactly its pairs) for skewed and
// uniform ids, and GroupedMatMul (problem list made on the device from the offsets) against
// kernels::MatMulReference per expert and bit for bit against MatMul over a host problem list.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda/ops.h"
#include "cuda/test_util.h"
#include "kernels/matmul.h"
#include "model/experts.h"

namespace epserve::cuda {
namespace {

using testing::MakeTestWeight;
using testing::MaxRelativeError;
using testing::RandomFloats;
using testing::TestWeight;
using testing::ToDevice;
using testing::ToHost;

// As matmul_test.cc: f32 warp sums against the double-accumulating twin (K <= 1024 here).
constexpr double kTol = 2e-5;
constexpr double kAbs = 1e-7;

// num_pairs ids over num_experts: uniform, or skewed (most pairs on a few low experts, and
// every 97th pair -1, which both layouts leave out).
std::vector<int32_t> MakeIds(int64_t num_pairs, int num_experts, bool skewed, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int32_t> ids(num_pairs);
  for (int64_t i = 0; i < num_pairs; ++i) {
    const double v = skewed ? std::pow(u(rng), 6.0) : u(rng);
    ids[i] = std::min(num_experts - 1, static_cast<int>(v * num_experts));
    if (skewed && i % 97 == 96) ids[i] = -1;
  }
  return ids;
}

TEST(CudaMoeLayoutTest, MatchesLayoutExpertMajorAsSets) {
  EPSERVE_REQUIRE_GPU();
  for (int num_experts : {64, 256})
    for (int64_t num_pairs : {1, 48, 1024, 6000})
      for (bool skewed : {false, true}) {
        const std::string what = std::to_string(num_pairs) + " pairs over " +
                                 std::to_string(num_experts) +
                                 (skewed ? " experts, skewed" : " experts, uniform");
        const std::vector<int32_t> ids =
            MakeIds(num_pairs, num_experts, skewed, num_pairs * 7 + num_experts);
        const ExpertMajorLayout want = LayoutExpertMajor(ids.data(), num_pairs, num_experts);
        DeviceBuffer d_ids = ToDevice(ids), d_offsets, d_rows;
        ASSERT_TRUE(d_offsets.Allocate((num_experts + 1) * 8, "offsets").ok());
        ASSERT_TRUE(d_rows.Allocate(num_pairs * 8, "rows").ok());
        ASSERT_TRUE(ExpertLayout(d_ids.as<int32_t>(), num_pairs, num_experts,
                                 d_offsets.as<int64_t>(), d_rows.as<int64_t>(), nullptr)
                        .ok())
            << what;
        const auto offsets = ToHost<int64_t>(d_offsets, num_experts + 1);
        const auto rows = ToHost<int64_t>(d_rows, num_pairs);
        ASSERT_EQ(offsets, want.offsets) << what;
        // Every pair on a row of its expert's range, no row twice (so each range holds exactly
        // its expert's pairs: the range sizes are the counts).
        std::vector<int> used(offsets[num_experts], 0);
        for (int64_t i = 0; i < num_pairs; ++i) {
          if (ids[i] < 0) {
            EXPECT_EQ(rows[i], -1) << what << ", pair " << i;
            continue;
          }
          ASSERT_GE(rows[i], offsets[ids[i]]) << what << ", pair " << i;
          ASSERT_LT(rows[i], offsets[ids[i] + 1]) << what << ", pair " << i;
          EXPECT_EQ(used[rows[i]]++, 0) << what << ", row " << rows[i];
        }
      }
}

TEST(CudaMoeLayoutTest, ZeroPairsGiveZeroOffsets) {
  EPSERVE_REQUIRE_GPU();
  DeviceBuffer d_offsets;
  ASSERT_TRUE(d_offsets.Allocate(9 * 8, "offsets").ok());
  ASSERT_TRUE(cudaMemset(d_offsets.data(), 0xFF, 9 * 8) == cudaSuccess);
  ASSERT_TRUE(ExpertLayout(nullptr, 0, 8, d_offsets.as<int64_t>(), nullptr, nullptr).ok());
  EXPECT_EQ(ToHost<int64_t>(d_offsets, 9), std::vector<int64_t>(9, 0));
}

// W [rows, cols] dequantized on the host.
std::vector<float> Dequantized(const WeightView& w) {
  std::vector<float> out(w.rows * w.cols);
  for (int64_t r = 0; r < w.rows; ++r) kernels::DequantizeRow(w, r, 0, w.cols, &out[r * w.cols]);
  return out;
}

// Experts with 0, 1, 9 and 17 rows (and a last empty one), both outputs (gate and up style) in
// one GroupedMatMul, then one output with accumulate: against the twin per expert, and bit for
// bit against MatMul over the same problems listed on the host.
TEST(CudaGroupedMatMulTest, MatchesTwinPerExpertAndMatMul) {
  EPSERVE_REQUIRE_GPU();
  const std::vector<int64_t> counts = {0, 1, 9, 17, 0};
  const int E = static_cast<int>(counts.size());
  std::vector<int64_t> offsets(E + 1, 0);
  for (int e = 0; e < E; ++e) offsets[e + 1] = offsets[e] + counts[e];
  const int64_t rows = offsets[E];
  for (DType dtype : {DType::kBF16, DType::kF8E4M3}) {
    const int64_t N = 200, K = 384;  // N: a partial last column group
    const std::string what = std::string(DTypeName(dtype));
    std::vector<TestWeight> w(2 * E);
    ExpertWeightTable tables[2];
    DeviceBuffer storage[2];
    for (int o = 0; o < 2; ++o) {
      std::vector<WeightView> views(E);
      for (int e = 0; e < E; ++e) {
        MakeTestWeight(dtype, N, K, 100 * o + e + 1, &w[o * E + e]);
        views[e] = w[o * E + e].device;
      }
      ASSERT_TRUE(MakeExpertWeightTable(views.data(), E, storage[o], &tables[o]).ok()) << what;
    }
    const std::vector<float> x = RandomFloats(rows * K, 7);
    for (bool accumulate : {false, true}) {
      const int outputs = accumulate ? 1 : 2;
      std::vector<std::vector<float>> y0(outputs), want(outputs);
      std::vector<std::vector<double>> magnitude(outputs);
      std::vector<DeviceBuffer> dy(outputs), dy_ref(outputs);
      std::vector<MatMulProblem> problems;
      for (int o = 0; o < outputs; ++o) {
        y0[o] = RandomFloats(rows * N, 11 + o);
        want[o] = y0[o];
        magnitude[o].assign(rows * N, kAbs / kTol);
        for (int e = 0; e < E; ++e) {
          const WeightView& hw = w[o * E + e].host;
          kernels::MatMulReference({.x = &x[offsets[e] * K],
                                    .num_rows = counts[e],
                                    .w = hw,
                                    .y = &want[o][offsets[e] * N],
                                    .accumulate = accumulate});
          const std::vector<float> wd = Dequantized(hw);
          for (int64_t m = offsets[e]; m < offsets[e + 1]; ++m)
            for (int64_t n = 0; n < N; ++n) {
              double sum = accumulate ? std::fabs(y0[o][m * N + n]) : 0.0;
              for (int64_t k = 0; k < K; ++k)
                sum += std::fabs(static_cast<double>(x[m * K + k]) * wd[n * K + k]);
              magnitude[o][m * N + n] += sum;
            }
        }
        dy[o] = ToDevice(y0[o]);
        dy_ref[o] = ToDevice(y0[o]);
      }
      DeviceBuffer dx = ToDevice(x), d_offsets = ToDevice(offsets), scratch, ref_scratch;
      GroupedMatMulArgs args{.offsets = d_offsets.as<int64_t>(),
                             .max_rows = rows + 5,  // a loose bound: blocks past the count
                             .x = dx.as<float>(),
                             .num_outputs = outputs,
                             .weights = {tables[0], tables[1]},
                             .y = {dy[0].as<float>(), dy[outputs - 1].as<float>()},
                             .options = {.accumulate = accumulate}};
      ASSERT_TRUE(GroupedMatMul(args, scratch, nullptr).ok()) << what;
      for (int e = 0; e < E; ++e)
        for (int o = 0; o < outputs; ++o)
          problems.push_back({.x = dx.as<float>() + offsets[e] * K,
                              .num_rows = counts[e],
                              .w = w[o * E + e].device,
                              .y = dy_ref[o].as<float>() + offsets[e] * N});
      ASSERT_TRUE(MatMul(problems.data(), static_cast<int>(problems.size()),
                         {.accumulate = accumulate}, ref_scratch, nullptr)
                      .ok());
      for (int o = 0; o < outputs; ++o) {
        const auto got = ToHost<float>(dy[o], rows * N);
        EXPECT_LE(MaxRelativeError(got, want[o], magnitude[o]), kTol)
            << what << ", output " << o << (accumulate ? ", accumulate" : "");
        EXPECT_TRUE(got == ToHost<float>(dy_ref[o], rows * N))
            << what << ", output " << o << ": differs from MatMul's bits";
      }
    }
  }
}

// The layout and the grouped MatMul together, as CudaModel::Moe uses them: ids -> offsets ->
// grouped products, against MatMul over the host's layout.
TEST(CudaGroupedMatMulTest, FollowsDeviceLayout) {
  EPSERVE_REQUIRE_GPU();
  const int E = 16;
  const int64_t pairs = 300, N = 96, K = 256;
  const std::vector<int32_t> ids = MakeIds(pairs, E, /*skewed=*/true, 3);
  std::vector<TestWeight> w(E);
  std::vector<WeightView> views(E);
  for (int e = 0; e < E; ++e) {
    MakeTestWeight(DType::kBF16, N, K, 50 + e, &w[e]);
    views[e] = w[e].device;
  }
  ExpertWeightTable table;
  DeviceBuffer storage, d_ids = ToDevice(ids), d_offsets, d_rows, scratch;
  ASSERT_TRUE(MakeExpertWeightTable(views.data(), E, storage, &table).ok());
  ASSERT_TRUE(d_offsets.Allocate((E + 1) * 8, "offsets").ok());
  ASSERT_TRUE(d_rows.Allocate(pairs * 8, "rows").ok());
  ASSERT_TRUE(ExpertLayout(d_ids.as<int32_t>(), pairs, E, d_offsets.as<int64_t>(),
                           d_rows.as<int64_t>(), nullptr)
                  .ok());
  const ExpertMajorLayout layout = LayoutExpertMajor(ids.data(), pairs, E);
  const int64_t rows = layout.offsets[E];
  const std::vector<float> x = RandomFloats(rows * K, 5);
  DeviceBuffer dx = ToDevice(x), dy, dy_ref, ref_scratch;
  ASSERT_TRUE(dy.Allocate(rows * N * 4, "y").ok());
  ASSERT_TRUE(dy_ref.Allocate(rows * N * 4, "y").ok());
  ASSERT_TRUE(GroupedMatMul({.offsets = d_offsets.as<int64_t>(),
                             .max_rows = pairs,
                             .x = dx.as<float>(),
                             .weights = {table},
                             .y = {dy.as<float>()}},
                            scratch, nullptr)
                  .ok());
  std::vector<MatMulProblem> problems;
  for (int e = 0; e < E; ++e)
    problems.push_back({.x = dx.as<float>() + layout.offsets[e] * K,
                        .num_rows = layout.offsets[e + 1] - layout.offsets[e],
                        .w = w[e].device,
                        .y = dy_ref.as<float>() + layout.offsets[e] * N});
  ASSERT_TRUE(MatMul(problems.data(), E, {}, ref_scratch, nullptr).ok());
  EXPECT_TRUE(ToHost<float>(dy, rows * N) == ToHost<float>(dy_ref, rows * N));
}

TEST(CudaGroupedMatMulTest, RejectsMismatchedTables) {
  EPSERVE_REQUIRE_GPU();
  TestWeight a, b;
  MakeTestWeight(DType::kBF16, 64, 128, 1, &a);
  MakeTestWeight(DType::kBF16, 64, 256, 2, &b);
  const WeightView views[2] = {a.device, b.device};
  ExpertWeightTable table;
  DeviceBuffer storage;
  EXPECT_FALSE(MakeExpertWeightTable(views, 2, storage, &table).ok());
}

}  // namespace
}  // namespace epserve::cuda
