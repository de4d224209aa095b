#include "planner/step_model.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "planner/test_util.h"

namespace epserve::planner {
namespace {

using testing::Efficiency;
using testing::Gpu;
using testing::Model;

struct Planned {
  HardwareSpec hw;
  ModelSpec model;
  EfficiencyFactors eff;
  Deployment deployment;
  RoutingModel routing;
  PlanContext Context() const {
    return {.hw = &hw, .model = &model, .eff = &eff, .routing = &routing};
  }
};

Planned MakeSetup(const std::string& gpu, const std::string& model_name, int ep, int tp) {
  ModelSpec model = Model(model_name);
  StatusOr<Deployment> d = MakeDeployment(model, ep, tp, 8);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  StatusOr<RoutingModel> routing = RoutingModel::Uniform(model, ep, d->RanksPerMachine());
  EXPECT_TRUE(routing.ok());
  return {
      .hw = Gpu(gpu), .model = model, .eff = Efficiency(), .deployment = *d, .routing = *routing};
}

Workload Requests(int batch) {
  return {.batch = batch, .kv_len = 5000, .query_len = 2, .acceptance_rate = 0.6};
}

TEST(MemoryFitTest, SingleH200MachineHoldsAbout100RequestsOf5000Tokens) {
  Planned s = MakeSetup("H200", "deepseek-v3", 8, 1);
  MemoryFit fit = EstimateMemory(s.Context(), s.deployment, Requests(90));
  std::printf("EP8 DP8 TP1 on H200: weights %.1f GB/GPU, KV free %.1f GB, max %d requests\n",
              fit.weight_bytes / 1e9, fit.free_for_kv_bytes / 1e9, fit.max_batch);
  // "~100 GB per GPU for the model, ~40 GB left for KV and intermediates" (write-up).
  EXPECT_NEAR(fit.weight_bytes / 1e9, 100, 5);
  EXPECT_NEAR(fit.free_for_kv_bytes / 1e9, 38, 4);
  // "about 100 requests of 5000 tokens per GPU"; 128 do not fit.
  EXPECT_GE(fit.max_batch, 90);
  EXPECT_LE(fit.max_batch, 110);
  EXPECT_LT(fit.max_batch, 128);
  EXPECT_TRUE(fit.batch_fits);
  MemoryFit too_many = EstimateMemory(s.Context(), s.deployment, Requests(128));
  EXPECT_FALSE(too_many.batch_fits);
  Status error = CheckMemory(too_many, s.Context(), s.deployment, Requests(128));
  EXPECT_FALSE(error.ok());
  EXPECT_NE(error.message().find("at most"), std::string::npos) << error.message();
}

TEST(MemoryFitTest, WeightsThatCannotFitAreAClearError) {
  // 671B parameters do not fit on one 8xH100 machine (80 GB x 8).
  Planned s = MakeSetup("H100", "deepseek-v3", 8, 1);
  MemoryFit fit = EstimateMemory(s.Context(), s.deployment, Requests(1));
  EXPECT_FALSE(fit.weights_fit);
  StatusOr<StepEstimate> est = EstimateStep(s.Context(), s.deployment, Requests(1), {});
  ASSERT_FALSE(est.ok());
  EXPECT_NE(est.status().message().find("weights per GPU"), std::string::npos)
      << est.status().message();
  // EP128 on H100 holds 128 requests per GPU (the write-up ran exactly that).
  Planned big = MakeSetup("H100", "deepseek-v3", 128, 1);
  EXPECT_TRUE(EstimateMemory(big.Context(), big.deployment, Requests(128)).batch_fits);
}

TEST(StepTest, SingleMachineTp8AtBatch1ExceedsHundredTokensPerSecond) {
  Planned s = MakeSetup("H200", "deepseek-v3", 8, 8);
  StatusOr<StepEstimate> est = EstimateStep(s.Context(), s.deployment, Requests(1), {});
  ASSERT_TRUE(est.ok()) << est.status().ToString();
  std::printf("EP8 DP1 TP8 batch 1 on H200: %.1f tokens/s per request, step %.2f ms\n", est->speed,
              est->step_us / 1e3);
  EXPECT_GT(est->speed, 100);
  // One request on the machine: throughput per machine equals the speed.
  EXPECT_NEAR(est->throughput_per_machine, est->speed, 1e-9);
  // 2 tokens x 8 experts touch ~16 experts in all, ~2 per GPU.
  EXPECT_NEAR(est->moe_layer.touched_experts, 2.0, 0.1);
}

TEST(StepTest, SpeedFollowsTokensPerStepAndModeChoice) {
  Planned s = MakeSetup("H100", "deepseek-v3", 128, 1);
  StatusOr<StepEstimate> best = EstimateStep(s.Context(), s.deployment, Requests(128), {});
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(best->mode, OverlapMode::kMicroBatch);
  EXPECT_NEAR(best->tokens_per_step, 1.6, 1e-12);
  EXPECT_NEAR(best->speed, 1.6 / (best->step_us * 1e-6), 1e-9);
  StatusOr<StepEstimate> small = EstimateStep(s.Context(), s.deployment, Requests(4), {});
  ASSERT_TRUE(small.ok());
  EXPECT_NE(small->mode, OverlapMode::kMicroBatch);
  // 16 machines x 8 GPUs x 128 requests.
  EXPECT_NEAR(best->throughput_per_machine, best->speed * 128 * 128 / 16, 1e-6);
}

TEST(StepTest, RunsDeepSeekV2Lite) {
  Planned s = MakeSetup("H100", "deepseek-v2-lite", 8, 1);
  StatusOr<StepEstimate> est = EstimateStep(s.Context(), s.deployment, Requests(16), {});
  ASSERT_TRUE(est.ok()) << est.status().ToString();
  EXPECT_GT(est->speed, 0);
  EXPECT_FALSE(est->notes.empty());                 // no MTP layers: the draft cost is not modeled
  EXPECT_NE(est->moe_layer.KernelUs("q_proj"), 0);  // q_lora_rank is null
  EXPECT_EQ(est->moe_layer.KernelUs("q_b_proj"), 0);
}

}  // namespace
}  // namespace epserve::planner
