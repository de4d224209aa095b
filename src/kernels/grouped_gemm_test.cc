#include "kernels/grouped_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/test_util.h"

namespace epserve::kernels {
namespace {

using testing::ForEachTarget;
using testing::MakeWeight;
using testing::RandomVector;
using testing::TestWeight;

class GroupedMlpTest : public ::testing::TestWithParam<DType> {};

// Groups of 0 (skipped), 1, 3, 8 (streaming kernel), 9 and 140 rows (panel kernel; gate/up in
// a chunk of 128 rows and one of 12); hidden and intermediate sizes that leave partial tiles and
// vector tails.
// Returns the reference output (for the clamp test to compare limits).
std::vector<float> CheckAgainstReference(DType dtype, float swiglu_limit) {
  const int64_t hidden = 300, inter = 72;
  const std::vector<int64_t> rows = {1, 0, 3, 8, 0, 9, 140};
  std::vector<TestWeight> store;
  std::vector<ExpertMlpWeights> experts;
  for (size_t g = 0; g < rows.size(); ++g) {
    store.push_back(MakeWeight(dtype, inter, hidden, 10 + g));
    store.push_back(MakeWeight(dtype, inter, hidden, 20 + g));
    store.push_back(MakeWeight(dtype, hidden, inter, 30 + g));
  }
  for (size_t g = 0; g < rows.size(); ++g)
    experts.push_back({store[3 * g].view, store[3 * g + 1].view, store[3 * g + 2].view});
  std::vector<int64_t> offsets = {0};
  for (int64_t r : rows) offsets.push_back(offsets.back() + r);
  const int64_t total = offsets.back();
  std::vector<float> x = RandomVector(total * hidden, 3);
  for (auto& v : x) v *= 0.05f;  // keeps gate inputs in SiLU's curved range
  std::vector<float> h(total * inter), ref(total * hidden), h_ref(total * inter);
  GroupedMlpArgs args{.num_groups = static_cast<int>(rows.size()),
                      .experts = experts.data(),
                      .offsets = offsets.data(),
                      .x = x.data(),
                      .h = h_ref.data(),
                      .out = ref.data(),
                      .swiglu_limit = swiglu_limit};
  GroupedMlpReference(args);
  double max_ref = 0;
  for (float v : ref) max_ref = std::max(max_ref, std::fabs(static_cast<double>(v)));
  ThreadPool one(1), two(2), three(3);
  ForEachTarget([&] {
    std::vector<float> y1(total * hidden), y2(total * hidden, -1.0f), y3(total * hidden, 7.0f);
    args.h = h.data();
    args.out = y1.data();
    GroupedMlp(args, one);
    args.out = y2.data();
    GroupedMlp(args, two);
    args.out = y3.data();
    GroupedMlp(args, three);
    for (int64_t i = 0; i < total * hidden; ++i) {
      ASSERT_NEAR(y1[i], ref[i], 2e-5 * max_ref) << i;
      ASSERT_EQ(y1[i], y2[i]) << i;
      ASSERT_EQ(y1[i], y3[i]) << i;
    }
  });
  return ref;
}

TEST_P(GroupedMlpTest, MatchesReferenceAndIsThreadCountInvariant) {
  CheckAgainstReference(GetParam(), 0);
}

// DeepSeek-V4's SwiGLU clamp (gate from above, up both sides) in both kernels and the twin; a
// limit this small clamps most values, so the output must differ from the unclamped one.
TEST_P(GroupedMlpTest, ClampsTheSwigluInputsLikeTheReference) {
  const std::vector<float> clamped = CheckAgainstReference(GetParam(), 0.01f);
  const std::vector<float> plain = CheckAgainstReference(GetParam(), 0);
  int64_t differ = 0;
  for (size_t i = 0; i < plain.size(); ++i) differ += clamped[i] != plain[i];
  EXPECT_GT(differ, static_cast<int64_t>(plain.size()) / 2);
}

// A row's output does not depend on how many rows its group has: each row through its expert
// alone (a group of one row, the streaming kernel) equals the same rows in one group of 140
// (the panel kernel, gate/up in two chunks), and in groups of 9 and 131. Expert parallelism
// gives an expert rows from every rank, so its row count changes with the other ranks' batches.
TEST_P(GroupedMlpTest, RowResultsDoNotDependOnGroupSize) {
  const int64_t hidden = 300, inter = 72, total = 140;
  TestWeight gate = MakeWeight(GetParam(), inter, hidden, 41);
  TestWeight up = MakeWeight(GetParam(), inter, hidden, 42);
  TestWeight down = MakeWeight(GetParam(), hidden, inter, 43);
  std::vector<float> x = RandomVector(total * hidden, 5);
  for (auto& v : x) v *= 0.05f;
  ThreadPool pool(2);
  auto run = [&](const std::vector<int64_t>& rows) {
    std::vector<ExpertMlpWeights> experts(rows.size(), {gate.view, up.view, down.view});
    std::vector<int64_t> offsets = {0};
    for (int64_t r : rows) offsets.push_back(offsets.back() + r);
    std::vector<float> h(total * inter), out(total * hidden);
    GroupedMlp({.num_groups = static_cast<int>(rows.size()),
                .experts = experts.data(),
                .offsets = offsets.data(),
                .x = x.data(),
                .h = h.data(),
                .out = out.data()},
               pool);
    return out;
  };
  ForEachTarget([&] {
    const std::vector<float> alone = run(std::vector<int64_t>(total, 1));
    for (const std::vector<int64_t>& rows : std::vector<std::vector<int64_t>>{{total}, {9, 131}}) {
      const std::vector<float> grouped = run(rows);
      for (int64_t i = 0; i < total * hidden; ++i)
        ASSERT_EQ(grouped[i], alone[i]) << "groups of " << rows[0] << " rows: @" << i;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, GroupedMlpTest,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF8E4M3),
                         [](const auto& info) { return testing::DTypeTestName(info.param); });

TEST(GroupedMlpTest, NoRowsTouchesNothing) {
  std::vector<int64_t> offsets = {0, 0, 0};
  std::vector<ExpertMlpWeights> experts(2);  // empty views: must not be read
  float out = 5.0f;
  ThreadPool pool(2);
  GroupedMlp({.num_groups = 2, .experts = experts.data(), .offsets = offsets.data(), .out = &out},
             pool);
  EXPECT_EQ(out, 5.0f);
}

}  // namespace
}  // namespace epserve::kernels
