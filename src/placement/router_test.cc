#include "placement/router.h"

#include <gtest/gtest.h>

#include <vector>

namespace epserve::placement {
namespace {

// 2 machines x 2 ranks, 4 experts:
//   expert 0: ranks 0 (w 1), 1 (w 1), 3 (w 2)   -- copies on both machines
//   expert 1: ranks 0 (w 1), 1 (w 3)            -- machine 0 only
//   expert 2: rank 2                            -- one copy
//   expert 3: rank 3
Placement TestPlacement() {
  Placement p;
  p.strategy = "test";
  p.topology = Topology{2, 2};
  p.model = ModelShape{.name = "t",
                       .num_experts = 4,
                       .top_k = 2,
                       .hidden_size = 8,
                       .moe_intermediate_size = 8,
                       .num_hidden_layers = 1,
                       .num_expert_groups = 1};
  LayerPlacement layer;
  layer.layer_id = 0;
  layer.slots = {{0, 1}, {0, 1}, {2}, {3, 0}};
  layer.copies = {{{0, 1}, {1, 1}, {3, 2}}, {{0, 1}, {1, 3}}, {{2, 1}}, {{3, 1}}};
  p.layers.push_back(layer);
  return p;
}

// Share of `keys` that `pick` sends to each rank.
std::vector<double> Shares(const Router& router, int expert, int src_rank, int keys) {
  std::vector<double> share(router.topology().num_ranks(), 0.0);
  for (int k = 0; k < keys; ++k) share[router.PickRank(0, expert, src_rank, k)] += 1.0 / keys;
  return share;
}

TEST(RouterTest, TopologyPrefersOwnRankThenOwnMachine) {
  StatusOr<Router> router = Router::Create(TestPlacement(), RoutingPolicy::kTopology);
  ASSERT_TRUE(router.ok()) << router.status().message();
  for (uint64_t key = 0; key < 1000; ++key) {
    // Tier 1: a copy on the token's rank.
    EXPECT_EQ(router->PickRank(0, 0, 0, key), 0);
    EXPECT_EQ(router->PickRank(0, 0, 1, key), 1);
    EXPECT_EQ(router->PickRank(0, 0, 3, key), 3);
    // Tier 2: rank 2 has no copy of expert 0; rank 3 on its machine has.
    EXPECT_EQ(router->PickRank(0, 0, 2, key), 3);
    // One copy: no choice.
    EXPECT_EQ(router->PickRank(0, 2, 0, key), 2);
  }
}

TEST(RouterTest, TopologyWeighsWithinTheRemoteTier) {
  StatusOr<Router> router = Router::Create(TestPlacement(), RoutingPolicy::kTopology);
  ASSERT_TRUE(router.ok());
  // Tier 3: expert 1 lives on machine 0 only; tokens of machine 1 split 1 : 3.
  const std::vector<double> share = Shares(*router, 1, 2, 40000);
  EXPECT_NEAR(share[0], 0.25, 0.01);
  EXPECT_NEAR(share[1], 0.75, 0.01);
  EXPECT_EQ(share[2] + share[3], 0.0);
}

// 4 machines x 1 rank, 4 experts, for the routing of a token's experts together:
//   expert 0: rank 1 only
//   expert 1: rank 2 (w 1), rank 1 (w 0.001)
//   expert 2: ranks 1 and 3 (w 1 each)
//   expert 3: ranks 2 and 3 (w 1 each)
Placement FourMachines() {
  Placement p = TestPlacement();
  p.topology = Topology{4, 1};
  LayerPlacement& layer = p.layers[0];
  layer.slots = {{}, {0, 1, 2}, {1, 3}, {2, 3}};
  layer.copies = {{{1, 1}}, {{2, 1}, {1, 0.001}}, {{1, 1}, {3, 1}}, {{2, 1}, {3, 1}}};
  return p;
}

TEST(RouterTest, TopologyRoutesATokensExpertsToFewMachines) {
  StatusOr<Router> router = Router::Create(FourMachines(), RoutingPolicy::kTopology);
  ASSERT_TRUE(router.ok()) << router.status().message();
  int to_rank_1 = 0;
  for (uint64_t key = 0; key < 1000; ++key) {
    std::vector<int> ranks(2);
    // Expert 0 takes the token to machine 1 anyway; expert 1's light copy there serves it too,
    // where on its own it would go home to machine 2.
    router->PickRanks(0, std::vector<int32_t>{1, 0}, 0, key, ranks);
    EXPECT_EQ(ranks, (std::vector<int>{1, 1}));
    to_rank_1 += router->PickRank(0, 1, 0, key) == 1;
    // Experts 2 and 3 share only machine 3: one machine instead of two.
    router->PickRanks(0, std::vector<int32_t>{2, 3}, 0, key, ranks);
    EXPECT_EQ(ranks, (std::vector<int>{3, 3}));
    // Held on machine 2, expert 3 stays; expert 2 has no copy there and picks by weight.
    router->PickRanks(0, std::vector<int32_t>{3, 2}, 2, key, ranks);
    EXPECT_EQ(ranks[0], 2);
    EXPECT_TRUE(ranks[1] == 1 || ranks[1] == 3);
  }
  EXPECT_LT(to_rank_1, 10);  // weight 0.001 of 1.001
  // The picks for one token depend on the token's own experts only, not on a call before.
  std::vector<int> a(2), b(2);
  router->PickRanks(0, std::vector<int32_t>{2, 3}, 0, 7, a);
  router->PickRanks(0, std::vector<int32_t>{0, 1}, 0, 7, b);
  router->PickRanks(0, std::vector<int32_t>{2, 3}, 0, 7, b);
  EXPECT_EQ(a, b);
}

TEST(RouterTest, WeightedIgnoresLocality) {
  StatusOr<Router> router = Router::Create(TestPlacement(), RoutingPolicy::kWeighted);
  ASSERT_TRUE(router.ok());
  const std::vector<double> share = Shares(*router, 0, 0, 40000);
  EXPECT_NEAR(share[0], 0.25, 0.01);
  EXPECT_NEAR(share[1], 0.25, 0.01);
  EXPECT_NEAR(share[3], 0.5, 0.01);
}

TEST(RouterTest, SameKeySameRank) {
  StatusOr<Router> a = Router::Create(TestPlacement(), RoutingPolicy::kWeighted);
  StatusOr<Router> b = Router::Create(TestPlacement(), RoutingPolicy::kWeighted);
  ASSERT_TRUE(a.ok() && b.ok());
  int differs = 0;
  for (uint64_t key = 0; key < 100; ++key) {
    EXPECT_EQ(a->PickRank(0, 0, 2, key), b->PickRank(0, 0, 2, key));
    differs += a->PickRank(0, 0, 2, key) != a->PickRank(0, 0, 2, key + 1);
  }
  EXPECT_GT(differs, 10);  // and different keys spread out
}

TEST(RouterTest, RejectsInvalidPlacement) {
  Placement p = TestPlacement();
  p.layers[0].copies[2].push_back(ExpertCopy{.rank = 0, .weight = 1});  // rank 0 lacks expert 2
  EXPECT_FALSE(Router::Create(p, RoutingPolicy::kTopology).ok());
}

}  // namespace
}  // namespace epserve::placement
