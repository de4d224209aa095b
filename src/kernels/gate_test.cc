#include "kernels/gate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace epserve::kernels {
namespace {

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

TEST(GateTest, NoauxTcKeepsBestGroupsAndWeighsByUnbiasedScore) {
  // 8 experts in 4 groups of 2; keep 2 groups; top-2.
  GateOptions opt{.scoring = ScoringFunc::kSigmoid, .method = TopkMethod::kNoauxTc, .num_experts = 8, .top_k = 2,
                  .num_groups = 4, .topk_groups = 2, .norm_topk_prob = true, .routed_scaling_factor = 2.5f};
  std::vector<float> logits = {3.0f, -5.0f, 1.0f, 1.0f, 0.0f, 0.5f, -1.0f, 2.0f};
  // Bias makes expert 6 the best single choice but its group (6,7) sum is what counts.
  std::vector<float> bias = {0, 0, 0, 0, 0, 0, 0.9f, 0};
  std::vector<float> scratch(16);
  int32_t ids[2];
  float w[2];
  GateTopK(opt, logits.data(), bias.data(), scratch.data(), ids, w);
  // group sums (sigmoid + bias): g0 = .953+.007=.960, g1 = .731*2=1.462, g2 = .5+.622=1.122,
  // g3 = (.269+.9)+.881=2.05 -> keep g3 and g1. Best biased: 6 (1.169), 7 (0.881).
  EXPECT_EQ(ids[0], 6);
  EXPECT_EQ(ids[1], 7);
  float s6 = Sigmoid(-1.0f), s7 = Sigmoid(2.0f);
  EXPECT_NEAR(w[0], s6 / (s6 + s7) * 2.5f, 1e-6);
  EXPECT_NEAR(w[1], s7 / (s6 + s7) * 2.5f, 1e-6);
}

TEST(GateTest, GreedySoftmaxWithoutNormalization) {
  GateOptions opt{.scoring = ScoringFunc::kSoftmax, .method = TopkMethod::kGreedy, .num_experts = 4, .top_k = 2,
                  .num_groups = 2, .topk_groups = 1, .norm_topk_prob = false, .routed_scaling_factor = 1.0f};
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.0f};
  std::vector<float> scratch(8);
  int32_t ids[2];
  float w[2];
  GateTopK(opt, logits.data(), nullptr, scratch.data(), ids, w);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 1);  // greedy ignores groups: 1 and 2 are in different groups
  double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + 1.0;
  EXPECT_NEAR(w[0], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(w[1], std::exp(2.0) / z, 1e-6);
}

TEST(GateTest, GroupLimitedGreedyUsesGroupMax) {
  GateOptions opt{.scoring = ScoringFunc::kSoftmax, .method = TopkMethod::kGroupLimitedGreedy, .num_experts = 4,
                  .top_k = 2, .num_groups = 2, .topk_groups = 1, .norm_topk_prob = true, .routed_scaling_factor = 1.0f};
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.0f};  // group1 = {2,3} has the max (3)
  std::vector<float> scratch(8);
  int32_t ids[2];
  float w[2];
  GateTopK(opt, logits.data(), nullptr, scratch.data(), ids, w);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 3);
  EXPECT_NEAR(w[0] + w[1], 1.0f, 1e-6);
}

}  // namespace
}  // namespace epserve::kernels
