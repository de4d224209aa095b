// Pins the write-up's per-layer figures (H100, TP1, 128 requests/GPU, query length 2, KV 5000,
// one MoE layer of DeepSeek-V3) to the roofline model within the 15% tolerance.
#include "planner/layer_model.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "planner/test_util.h"

namespace epserve::planner {
namespace {

using testing::Efficiency;
using testing::Gpu;
using testing::Model;
using testing::RelErr;

class PublishedLayerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    hw_ = Gpu("H100");
    model_ = Model("deepseek-v3");
    eff_ = Efficiency();
  }

  LayerBreakdown Layer(int ep, OverlapMode mode, int batch = 128) {
    StatusOr<Deployment> d = MakeDeployment(model_, ep, /*tp=*/1, /*gpus_per_machine=*/8);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    StatusOr<RoutingModel> routing = RoutingModel::Uniform(model_, ep, d->RanksPerMachine());
    EXPECT_TRUE(routing.ok());
    PlanContext ctx{.hw = &hw_, .model = &model_, .eff = &eff_, .routing = &*routing};
    Workload w{.batch = batch, .kv_len = 5000, .query_len = 2, .acceptance_rate = 0.6};
    StatusOr<LayerBreakdown> layer = ModelMoeLayer(ctx, *d, w, mode);
    EXPECT_TRUE(layer.ok()) << layer.status().ToString();
    return *layer;
  }

  static double GroupGemmUs(const LayerBreakdown& l) {
    return l.KernelUs("group_gemm_gate_up") + l.KernelUs("group_gemm_down");
  }

  HardwareSpec hw_;
  ModelSpec model_;
  EfficiencyFactors eff_;
};

TEST_F(PublishedLayerTest, Ep128OverlapModesMatchPublishedTotals) {
  const LayerBreakdown none = Layer(128, OverlapMode::kNone);
  const LayerBreakdown dispatch = Layer(128, OverlapMode::kDispatchOverlap);
  const LayerBreakdown micro = Layer(128, OverlapMode::kMicroBatch);
  std::printf("EP128 none %.0f (2667)  dispatch-overlap %.0f (2651)  micro-batch %.0f (1896)\n",
              none.total_us, dispatch.total_us, micro.total_us);
  EXPECT_NEAR(RelErr(none.total_us, 2667), 0, 0.15);
  EXPECT_NEAR(RelErr(dispatch.total_us, 2651), 0, 0.15);
  EXPECT_NEAR(RelErr(micro.total_us, 1896), 0, 0.15);
  // Dispatch overlap only hides the shared expert: a small saving (published 16 us, 0.6%).
  EXPECT_LT(dispatch.total_us, none.total_us);
  EXPECT_LT(none.total_us - dispatch.total_us, 0.03 * none.total_us);
  // Micro-batching wins big at 128 requests (published -29%).
  EXPECT_LT(micro.total_us, 0.8 * dispatch.total_us);
}

TEST_F(PublishedLayerTest, Ep128CommunicationBreakdown) {
  const LayerBreakdown none = Layer(128, OverlapMode::kNone);
  const LayerBreakdown micro = Layer(128, OverlapMode::kMicroBatch);
  std::printf(
      "EP128 dispatch %.0f (593) combine %.0f (1012); micro visible %.0f (367) %.0f (237)\n",
      none.dispatch.visible_us, none.combine.visible_us, micro.dispatch.visible_us,
      micro.combine.visible_us);
  EXPECT_NEAR(RelErr(none.dispatch.visible_us, 593), 0, 0.15);
  EXPECT_NEAR(RelErr(none.combine.visible_us, 1012), 0, 0.15);
  // Micro-batching hides most of the communication (published 1605 -> 604 us).
  const double visible = micro.dispatch.visible_us + micro.combine.visible_us;
  EXPECT_LT(visible, 0.55 * (none.dispatch.visible_us + none.combine.visible_us));
  // ...but splitting the batch costs compute (published +230 us; GEMMs +95 us).
  const double extra = micro.compute_us - none.compute_us;
  std::printf("micro-batch extra compute %.0f us (published ~230)\n", extra);
  EXPECT_GT(extra, 100);
  EXPECT_LT(extra, 400);
}

TEST_F(PublishedLayerTest, MicroBatchAddsPublishedGemmTime) {
  const LayerBreakdown none = Layer(128, OverlapMode::kNone);
  const LayerBreakdown micro = Layer(128, OverlapMode::kMicroBatch);
  auto projections = [](const LayerBreakdown& l) {
    return l.KernelUs("qkv_a_proj") + l.KernelUs("q_b_proj") + l.KernelUs("o_proj");
  };
  const double extra = projections(micro) - projections(none);
  std::printf("GEMM (QKV/O projections) extra under micro-batching %.0f us (95)\n", extra);
  EXPECT_NEAR(RelErr(extra, 95), 0, 0.15);
}

TEST_F(PublishedLayerTest, GroupGemmEp8VersusEp128) {
  // The write-up's EP8 series runs the whole batch (its other kernels equal EP128 NoOverlap's);
  // EP128's 270 us is from the micro-batched run.
  const double ep8 = GroupGemmUs(Layer(8, OverlapMode::kDispatchOverlap));
  const double ep128 = GroupGemmUs(Layer(128, OverlapMode::kMicroBatch));
  std::printf("GroupGEMM EP8 %.0f (555)  EP128 %.0f (270)\n", ep8, ep128);
  EXPECT_NEAR(RelErr(ep8, 555), 0, 0.15);
  EXPECT_NEAR(RelErr(ep128, 270), 0, 0.15);
}

TEST_F(PublishedLayerTest, Ep8LayerTotal) {
  const LayerBreakdown full = Layer(8, OverlapMode::kDispatchOverlap);
  const LayerBreakdown micro = Layer(8, OverlapMode::kMicroBatch);
  std::printf("EP8 whole batch %.0f, micro-batched %.0f (published 1802)\n", full.total_us,
              micro.total_us);
  // The write-up's 1802 us EP8 bar is the whole-batch run (see GroupGemmEp8VersusEp128).
  EXPECT_NEAR(RelErr(full.total_us, 1802), 0, 0.15);
  // Micro-batching at EP8 reads every local expert twice and hides little NVLink time: the
  // planner must not choose it here.
  EXPECT_GT(micro.total_us, full.total_us);
  // Tokens per expert: m = 128 x 2 x 8 x EP / 256 (64 at EP8, 1024 at EP128).
  EXPECT_NEAR(full.tokens_per_expert, 64, 0.5);
  EXPECT_NEAR(Layer(128, OverlapMode::kNone).tokens_per_expert, 1024, 1);
}

TEST_F(PublishedLayerTest, MicroBatchLosesBelow32AndWinsFrom32) {
  for (int batch : {4, 8, 16, 32, 64, 128}) {
    const double dispatch = Layer(128, OverlapMode::kDispatchOverlap, batch).total_us;
    const double micro = Layer(128, OverlapMode::kMicroBatch, batch).total_us;
    const double gain = dispatch / micro - 1;
    std::printf("batch %3d: micro-batch vs dispatch-overlap %+.0f%%\n", batch, 100 * gain);
    if (batch < 32) {
      EXPECT_LT(gain, 0) << "batch " << batch;
    } else {
      EXPECT_GT(gain, 0.05) << "batch " << batch;
    }
  }
}

TEST_F(PublishedLayerTest, RoutingMustMatchEp) {
  StatusOr<Deployment> d = MakeDeployment(model_, 16, 1, 8);
  ASSERT_TRUE(d.ok());
  StatusOr<RoutingModel> routing = RoutingModel::Uniform(model_, 8, 8);
  ASSERT_TRUE(routing.ok());
  PlanContext ctx{.hw = &hw_, .model = &model_, .eff = &eff_, .routing = &*routing};
  EXPECT_FALSE(ModelMoeLayer(ctx, *d, Workload{}, OverlapMode::kNone).ok());
  StatusOr<RoutingModel> right = RoutingModel::Uniform(model_, 16, 8);
  ctx.routing = &*right;
  EXPECT_FALSE(ModelMoeLayer(ctx, *d, Workload{.batch = 1}, OverlapMode::kMicroBatch).ok());
}

}  // namespace
}  // namespace epserve::planner
