// cuda::GateTopK against kernels::GateTopK on random logits: V3's router (sigmoid, noaux_tc with
// bias, 8 groups), V2-Lite's (softmax, greedy, no norm), group_limited_greedy, and the other
// method/scoring pairs; logits with exact duplicates check that ties go to the lower id.
#include "kernels/gate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/ops.h"
#include "cuda/test_util.h"

namespace epserve::cuda {
namespace {

using kernels::GateOptions;
using kernels::ScoringFunc;
using kernels::TopkMethod;
using testing::RandomFloats;
using testing::ToDevice;
using testing::ToHost;

// The kernel repeats the twin's float operations in order with a correctly rounded exp, so the
// weights should agree to an ulp or two; 1e-6 relative is the contract.
constexpr double kTol = 1e-6;
constexpr int64_t kTokens = 300;  // more than one block of threads

// Random logits; every third token copies some values onto others (exact ties) and every
// fifth is constant, so that ties decide experts, groups and order.
std::vector<float> Logits(int n, uint64_t seed) {
  std::vector<float> v = RandomFloats(kTokens * n, seed, 2.0f);
  std::mt19937_64 rng(seed + 1);
  std::uniform_int_distribution<int> pick(0, n - 1);
  for (int64_t t = 0; t < kTokens; ++t) {
    float* x = v.data() + t * n;
    if (t % 5 == 4) {
      for (int i = 0; i < n; ++i) x[i] = 0.5f;
    } else if (t % 3 == 0) {
      for (int k = 0; k < n / 4; ++k) x[pick(rng)] = x[pick(rng)];
    }
  }
  return v;
}

void RunCase(const GateOptions& opt, bool with_bias, uint64_t seed) {
  const int n = opt.num_experts, k = opt.top_k;
  const std::vector<float> logits = Logits(n, seed);
  // Bias with duplicates too (and zero for every other expert, so choice ties survive it).
  std::vector<float> bias = RandomFloats(n, seed + 2, 0.1f);
  for (int i = 0; i < n; i += 2) bias[i] = 0.0f;

  std::vector<int32_t> want_ids(kTokens * k);
  std::vector<float> want_w(kTokens * k), scratch(2 * n);
  for (int64_t t = 0; t < kTokens; ++t)
    kernels::GateTopK(opt, logits.data() + t * n, with_bias ? bias.data() : nullptr, scratch.data(),
                      want_ids.data() + t * k, want_w.data() + t * k);

  DeviceBuffer d_logits = ToDevice(logits), d_bias = ToDevice(bias);
  DeviceBuffer d_ids, d_w;
  ASSERT_TRUE(d_ids.Allocate(kTokens * k * 4, "ids").ok());
  ASSERT_TRUE(d_w.Allocate(kTokens * k * 4, "weights").ok());
  const Status st = GateTopK(opt, d_logits.as<float>(), with_bias ? d_bias.as<float>() : nullptr,
                             kTokens, d_ids.as<int32_t>(), d_w.as<float>(), nullptr);
  ASSERT_TRUE(st.ok()) << st.message();
  const std::vector<int32_t> ids = ToHost<int32_t>(d_ids, want_ids.size());
  const std::vector<float> w = ToHost<float>(d_w, want_w.size());
  for (int64_t t = 0; t < kTokens; ++t)
    for (int j = 0; j < k; ++j) {
      const int64_t i = t * k + j;
      ASSERT_EQ(ids[i], want_ids[i]) << "token " << t << ", slot " << j;
      EXPECT_LE(std::fabs(static_cast<double>(w[i]) - want_w[i]),
                kTol * std::fabs(static_cast<double>(want_w[i])))
          << "token " << t << ", slot " << j << ": " << w[i] << " vs " << want_w[i];
    }
}

GateOptions V3() {
  return {.scoring = ScoringFunc::kSigmoid,
          .method = TopkMethod::kNoauxTc,
          .num_experts = 256,
          .top_k = 8,
          .num_groups = 8,
          .topk_groups = 4,
          .norm_topk_prob = true,
          .routed_scaling_factor = 2.5f};
}

GateOptions V2Lite() {
  return {.scoring = ScoringFunc::kSoftmax,
          .method = TopkMethod::kGreedy,
          .num_experts = 64,
          .top_k = 6,
          .num_groups = 1,
          .topk_groups = 1,
          .norm_topk_prob = false,
          .routed_scaling_factor = 1.0f};
}

TEST(GateTopKTest, DeepSeekV3NoauxTc) {
  EPSERVE_REQUIRE_GPU();
  RunCase(V3(), /*with_bias=*/true, 21);
  RunCase(V3(), /*with_bias=*/false, 22);
}

TEST(GateTopKTest, DeepSeekV2LiteGreedySoftmax) {
  EPSERVE_REQUIRE_GPU();
  RunCase(V2Lite(), false, 23);
}

TEST(GateTopKTest, GroupLimitedGreedy) {
  EPSERVE_REQUIRE_GPU();
  // V2's router: softmax, 160 experts in 8 groups, top 3 groups, top 6 (bias ignored).
  GateOptions opt = {.scoring = ScoringFunc::kSoftmax,
                     .method = TopkMethod::kGroupLimitedGreedy,
                     .num_experts = 160,
                     .top_k = 6,
                     .num_groups = 8,
                     .topk_groups = 3,
                     .norm_topk_prob = false,
                     .routed_scaling_factor = 16.0f};
  RunCase(opt, true, 24);
  opt.scoring = ScoringFunc::kSigmoid;
  opt.norm_topk_prob = true;
  RunCase(opt, false, 25);
}

TEST(GateTopKTest, EveryMethodAndScoring) {
  EPSERVE_REQUIRE_GPU();
  uint64_t seed = 30;
  for (ScoringFunc scoring : {ScoringFunc::kSigmoid, ScoringFunc::kSoftmax})
    for (TopkMethod method :
         {TopkMethod::kNoauxTc, TopkMethod::kGreedy, TopkMethod::kGroupLimitedGreedy}) {
      GateOptions opt = V3();
      opt.scoring = scoring;
      opt.method = method;
      RunCase(opt, true, seed++);
      opt.top_k = 1;  // no normalisation with one expert
      RunCase(opt, true, seed++);
    }
}

// Argument checks happen before anything touches the device.
TEST(GateTopKArgsTest, EmptyIsNoOpAndBadOptionsAreRejected) {
  GateOptions opt = V3();
  EXPECT_TRUE(GateTopK(opt, nullptr, nullptr, 0, nullptr, nullptr, nullptr).ok());
  opt.num_experts = 320;
  EXPECT_EQ(GateTopK(opt, nullptr, nullptr, 0, nullptr, nullptr, nullptr).code(),
            StatusCode::kInvalidArgument);
  opt = V3();
  opt.topk_groups = 9;
  EXPECT_EQ(GateTopK(opt, nullptr, nullptr, 0, nullptr, nullptr, nullptr).code(),
            StatusCode::kInvalidArgument);
  opt = V3();
  opt.top_k = 0;
  EXPECT_EQ(GateTopK(opt, nullptr, nullptr, 0, nullptr, nullptr, nullptr).code(),
            StatusCode::kInvalidArgument);
  opt = V3();
  EXPECT_EQ(GateTopK(opt, nullptr, nullptr, 1, nullptr, nullptr, nullptr).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace epserve::cuda
