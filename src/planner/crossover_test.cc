// MicroBatchCrossover against the write-up's finding (SPEC §5): micro-batching loses below 32
// requests per GPU and wins from 32 on (EP128, H100, query length 2, KV 5000).
#include "planner/crossover.h"

#include <gtest/gtest.h>

#include "planner/test_util.h"

namespace epserve::planner {
namespace {

struct CrossoverCase {
  HardwareSpec hw = testing::Gpu("H100");
  ModelSpec model = testing::Model("deepseek-v3");
  EfficiencyFactors eff = testing::Efficiency();

  StatusOr<Crossover> Run(int ep, int max_batch) {
    StatusOr<Deployment> d = MakeDeployment(model, ep, /*tp=*/1, /*gpus_per_machine=*/8);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    StatusOr<RoutingModel> routing = RoutingModel::Uniform(model, ep, d->RanksPerMachine());
    EXPECT_TRUE(routing.ok());
    PlanContext ctx{.hw = &hw, .model = &model, .eff = &eff, .routing = &*routing};
    return MicroBatchCrossover(ctx, *d, {.kv_len = 5000, .query_len = 2}, max_batch);
  }
};

TEST(MicroBatchCrossoverTest, Ep128CrossesBetween16And32Requests) {
  CrossoverCase c;
  StatusOr<Crossover> x = c.Run(128, 256);
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  EXPECT_GT(x->batch, 16);
  EXPECT_LE(x->batch, 32);
  EXPECT_LT(x->microbatch_us, x->dispatch_us);
}

TEST(MicroBatchCrossoverTest, NoCrossoverInRangeReportsZero) {
  CrossoverCase c;
  StatusOr<Crossover> x = c.Run(128, 4);  // micro-batching loses at 2..4
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  EXPECT_EQ(x->batch, 0);
  EXPECT_GT(x->microbatch_us, x->dispatch_us);
}

TEST(MicroBatchCrossoverTest, RejectsTooSmallRange) {
  CrossoverCase c;
  EXPECT_FALSE(c.Run(128, 1).ok());
}

}  // namespace
}  // namespace epserve::planner
