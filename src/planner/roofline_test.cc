#include "planner/roofline.h"

#include <gtest/gtest.h>

#include "planner/test_util.h"

namespace epserve::planner {
namespace {

using testing::Gpu;

TEST(RooflineTest, GroupGemmFlopsAndBytesFollowSpec) {
  HardwareSpec h100 = Gpu("H100");
  KernelEfficiency ideal;
  // SPEC §6: FLOPs 2*g*m*k*n, bytes g*(m*k + n*k + m*n).
  KernelCost cost = MatmulCost(h100, ideal, {.groups = 2, .m = 1024, .k = 7168, .n = 4096});
  EXPECT_DOUBLE_EQ(cost.flops, 2.0 * 2 * 1024 * 7168 * 4096);
  EXPECT_DOUBLE_EQ(cost.bytes, 2.0 * (1024.0 * 7168 + 4096.0 * 7168 + 1024.0 * 4096));
  EXPECT_TRUE(cost.compute_bound);  // intensity ~1500 FLOP/B > ridge 1979/3.35 = 591
  EXPECT_NEAR(cost.time_us, cost.flops / 1979e12 * 1e6, 1e-9);
  // m = 1: memory-bound, time = bytes / bandwidth.
  KernelCost gemv = MatmulCost(h100, ideal, {.m = 1, .k = 7168, .n = 2112});
  EXPECT_FALSE(gemv.compute_bound);
  EXPECT_NEAR(gemv.time_us, gemv.bytes / 3.35e12 * 1e6, 1e-9);
}

TEST(RooflineTest, EfficiencyAndOverheadScaleTime) {
  HardwareSpec h100 = Gpu("H100");
  KernelEfficiency eff{.compute = 0.5, .memory = 0.8, .overhead_us = 10};
  MatmulShape shape{.m = 2, .k = 7168, .n = 16384};
  KernelCost ideal = MatmulCost(h100, KernelEfficiency{}, shape);
  KernelCost real = MatmulCost(h100, eff, shape);
  EXPECT_NEAR(real.time_us, 10 + ideal.time_us / 0.8, 1e-9);
  EXPECT_EQ(MatmulCost(h100, eff, {.m = 0, .k = 7168, .n = 16384}).time_us, 0);  // no launch
  // BF16 doubles the bytes and halves the compute roof.
  KernelCost bf16 = MatmulCost(
      h100, KernelEfficiency{},
      {.m = 2, .k = 7168, .n = 16384, .element_bytes = 2, .precision = Precision::kBf16});
  EXPECT_DOUBLE_EQ(bf16.bytes, 2 * ideal.bytes);
}

TEST(RooflineTest, MlaAttentionReadsTheLatentCacheOnce) {
  HardwareSpec h100 = Gpu("H100");
  AttentionShape s{.requests = 128,
                   .query_len = 2,
                   .kv_len = 5000,
                   .heads = 128,
                   .latent_dim = 512,
                   .rope_dim = 64};
  KernelCost cost = AttentionCost(h100, KernelEfficiency{}, s);
  EXPECT_DOUBLE_EQ(cost.flops, 2.0 * 128 * 2 * 128 * 5000 * (576 + 512));
  EXPECT_GT(cost.bytes, 128.0 * 5000 * 576 * 2);
  EXPECT_TRUE(cost.compute_bound);  // query length 2 x 128 heads share every cached vector
  s.query_len = 1;
  s.heads = 8;
  EXPECT_FALSE(AttentionCost(h100, KernelEfficiency{}, s).compute_bound);
}

TEST(RooflineTest, CommunicationUsesTheSlowerFabric) {
  HardwareSpec h100 = Gpu("H100");
  CommEfficiency eff{.nvlink = 0.5, .infiniband = 0.5, .overhead_us = 20};
  EXPECT_EQ(CommCost(h100, eff, {}).time_us, 0);
  KernelCost ib = CommCost(h100, eff, {.nvlink = 1e6, .infiniband = 1e6});
  EXPECT_NEAR(ib.time_us, 20 + 5 + 1e6 / 25e9 * 1e6, 1e-9);  // IB: 5 us + 1 MB at 25 GB/s
  KernelCost nv = CommCost(h100, eff, {.nvlink = 1e6});
  EXPECT_NEAR(nv.time_us, 20 + 3 + 1e6 / 225e9 * 1e6, 1e-9);
}

}  // namespace
}  // namespace epserve::planner
