#include "placement/eplb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace epserve::placement {
namespace {

ModelShape Shape(int experts, int groups) {
  return ModelShape{.name = "t",
                    .num_experts = experts,
                    .top_k = 2,
                    .hidden_size = 8,
                    .moe_intermediate_size = 8,
                    .num_hidden_layers = 2,
                    .num_expert_groups = groups};
}

LayerProfile Profile(int layer_id, std::vector<double> load) {
  LayerProfile p;
  p.layer_id = layer_id;
  p.num_experts = static_cast<int>(load.size());
  p.load = std::move(load);
  return p;
}

TEST(EplbTest, BalancedPackingFillsTheLightestBinWithRoom) {
  const Packing p = BalancedPacking({10, 9, 8, 7, 6, 5, 4, 3}, {4, 4});
  // 10->0, 9->1, 8->1, 7->0, 6->0 (tie), 5->1, 4->1 (bin 1 now full), 3->0: 26 and 26.
  EXPECT_EQ(p.pack, (std::vector<int>{0, 1, 1, 0, 0, 1, 1, 0}));
  EXPECT_EQ(p.slot, (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
  const Packing uneven = BalancedPacking({5, 1, 1}, {1, 2});
  EXPECT_EQ(uneven.pack, (std::vector<int>{0, 1, 1}));
}

TEST(EplbTest, ReplicasGoToTheHighestLoadPerCopy) {
  // 8/1 > 4 -> copy of 0; then 8/2 = 4/1, tie -> lower id 0 again; then 4/1 > 8/3 -> 1.
  EXPECT_EQ(ReplicateExperts({8, 4, 2}, 6), (std::vector<int>{0, 1, 2, 0, 0, 1}));
  EXPECT_EQ(ReplicateExperts({1, 2}, 2), (std::vector<int>{0, 1}));
}

TEST(EplbTest, EvenSplit) {
  EXPECT_EQ(EvenSplit(10, 4), (std::vector<int>{3, 3, 2, 2}));
  EXPECT_EQ(EvenSplit(2, 3), (std::vector<int>{1, 1, 0}));
}

TEST(EplbTest, ResolvesTheMode) {
  const EplbOptions automatic;
  StatusOr<EplbResolved> r = ResolveEplb(Topology{2, 4}, Shape(64, 1), automatic);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->mode, EplbMode::kGlobal);
  r = ResolveEplb(Topology{2, 4}, Shape(64, 8), automatic);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->mode, EplbMode::kHierarchical);
  EXPECT_EQ(r->num_groups, 8);
  // Forced hierarchical on a model without usable groups: one group per rank.
  r = ResolveEplb(Topology{2, 4}, Shape(64, 1), EplbOptions{.mode = EplbMode::kHierarchical});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->num_groups, 8);
  // 60 experts (Qwen1.5-MoE): no 8 equal groups; the finest fit is 6 groups of 10 on 2 x 4 and
  // 12 of 5 on 4 x 4 and 2 x 8.
  r = ResolveEplb(Topology{2, 4}, Shape(60, 1), EplbOptions{.mode = EplbMode::kHierarchical});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->num_groups, 6);
  r = ResolveEplb(Topology{4, 4}, Shape(60, 1), EplbOptions{.mode = EplbMode::kHierarchical});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->num_groups, 12);
  r = ResolveEplb(Topology{2, 8}, Shape(60, 1), EplbOptions{.mode = EplbMode::kHierarchical});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->num_groups, 12);
  EXPECT_TRUE(PlaceEplbLayer(Profile(1, std::vector<double>(60, 1.0)), Topology{2, 4}, Shape(60, 1),
                             EplbOptions{.mode = EplbMode::kHierarchical, .num_redundant = 7})
                  .ok());
  // An odd expert count cannot be split evenly over two machines at all.
  EXPECT_EQ(ResolveEplb(Topology{2, 2}, Shape(63, 1), EplbOptions{.mode = EplbMode::kHierarchical})
                .status()
                .message(),
            "EPLB hierarchical: 63 experts cannot be split into equal groups spread evenly over 2 "
            "machines");
  EXPECT_FALSE(ResolveEplb(Topology{2, 4}, Shape(64, 1), EplbOptions{.num_groups = 3}).ok());
  EXPECT_FALSE(ResolveEplb(Topology{4, 4}, Shape(64, 1),
                           EplbOptions{.mode = EplbMode::kHierarchical, .num_groups = 2})
                   .ok());
}

TEST(EplbTest, GlobalModeReplicatesAndPacks) {
  std::vector<double> load(8, 1.0);
  load[0] = 100;
  StatusOr<LayerPlacement> layer = PlaceEplbLayer(Profile(3, load), Topology{1, 2}, Shape(8, 1),
                                                  EplbOptions{.num_redundant = 2});
  ASSERT_TRUE(layer.ok()) << layer.status().message();
  // Expert 0 gets three copies of 33.3; packing puts two of them on rank 0 (EPLB does not
  // keep copies of one expert apart).
  EXPECT_EQ(layer->slots[0], (std::vector<int>{0, 0, 5, 6, 7}));
  EXPECT_EQ(layer->slots[1], (std::vector<int>{0, 1, 2, 3, 4}));
  ASSERT_EQ(layer->copies[0].size(), 2u);
  EXPECT_EQ(layer->copies[0][0].rank, 0);
  EXPECT_DOUBLE_EQ(layer->copies[0][0].weight, 2.0);
  EXPECT_DOUBLE_EQ(layer->copies[0][1].weight, 1.0);
  EXPECT_EQ(layer->NumExtraCopies(), 2);
  const std::vector<double> loads = RankLoads(*layer, load, 2);
  EXPECT_NEAR(loads[0], 200.0 / 3 + 3, 1e-9);
  EXPECT_NEAR(loads[1], 100.0 / 3 + 4, 1e-9);
}

TEST(EplbTest, HierarchicalModePacksGroupsOntoMachines) {
  const std::vector<double> load = {8, 8, 1, 1, 4, 4, 2, 2};  // groups of 2: 16, 2, 8, 4
  StatusOr<LayerPlacement> layer = PlaceEplbLayer(Profile(1, load), Topology{2, 2}, Shape(8, 4),
                                                  EplbOptions{.num_redundant = 0});
  ASSERT_TRUE(layer.ok()) << layer.status().message();
  // Groups 0 and 1 on machine 0 (16 + 2), groups 2 and 3 on machine 1 (8 + 4).
  EXPECT_EQ(layer->slots, (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
}

TEST(EplbTest, RedundantCopiesNeedNotDivideEvenly) {
  const std::vector<double> load = {8, 8, 1, 1, 4, 4, 2, 2};
  StatusOr<LayerPlacement> layer = PlaceEplbLayer(Profile(1, load), Topology{2, 2}, Shape(8, 4),
                                                  EplbOptions{.num_redundant = 3});
  ASSERT_TRUE(layer.ok());
  EXPECT_EQ(layer->NumExtraCopies(), 3);
  // The heavier machine 0 gets two extra copies, machine 1 one; ranks differ by at most one.
  EXPECT_EQ(layer->slots[0].size() + layer->slots[1].size(), 6u);
  EXPECT_EQ(layer->slots[2].size() + layer->slots[3].size(), 5u);
  for (const auto& s : layer->slots) EXPECT_GE(s.size(), 2u);
  // Replicas stay on their machine.
  for (int r = 2; r < 4; ++r) {
    for (int e : layer->slots[r]) EXPECT_GE(e, 4);
  }
}

TEST(EplbTest, RejectsBadInput) {
  EXPECT_FALSE(PlaceEplbLayer(Profile(1, {1, 2}), Topology{1, 2}, Shape(8, 1), EplbOptions{}).ok());
  EXPECT_FALSE(PlaceEplbLayer(Profile(1, std::vector<double>(8, 1)), Topology{1, 2}, Shape(8, 1),
                              EplbOptions{.num_redundant = -1})
                   .ok());
}

}  // namespace
}  // namespace epserve::placement
