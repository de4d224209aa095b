#include "placement/grace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "placement/synthetic.h"

namespace epserve::placement {
namespace {

TEST(GraceTest, ReplicaCountFormula) {
  EXPECT_EQ(ReplicaCount(30, 10, 8), 3);  // floor(3)
  EXPECT_EQ(ReplicaCount(15, 10, 8), 1);  // floor(1.5)
  EXPECT_EQ(ReplicaCount(10, 10, 8), 1);  // at least one
  EXPECT_EQ(ReplicaCount(29.9, 10, 8), 2);
  EXPECT_EQ(ReplicaCount(50, 10, 4), 3);  // at most n_ranks - 1
  EXPECT_EQ(ReplicaCount(10, 10, 1), 0);  // nowhere to copy to
}

TEST(GraceTest, ReplicationPlanFollowsTheSpec) {
  // Rank loads 100, 10, 20, 30: mean 40, rho 2.5, n = 2. Hot experts of rank 0 until they cover
  // 100 * 2 / 3: expert 0 (50) then expert 1 (80).
  const std::vector<std::vector<int>> ranks = {{0, 1, 2}, {3}, {4}, {5}};
  const std::vector<double> load = {50, 30, 20, 10, 20, 30};
  const ReplicationPlan plan = PlanReplication(ranks, load, 0);
  EXPECT_EQ(plan.heaviest_rank, 0);
  EXPECT_DOUBLE_EQ(plan.rho, 2.5);
  EXPECT_EQ(plan.num_replicas, 2);
  EXPECT_EQ(plan.hot_experts, (std::vector<int>{0, 1}));
  EXPECT_EQ(plan.target_ranks, (std::vector<int>{1, 2}));
  // W_r = 80, shared three ways.
  EXPECT_NEAR(plan.predicted_load[0], 100 - 80 + 80.0 / 3, 1e-9);
  EXPECT_NEAR(plan.predicted_load[1], 10 + 80.0 / 3, 1e-9);
  EXPECT_NEAR(plan.predicted_load[2], 20 + 80.0 / 3, 1e-9);
  EXPECT_NEAR(plan.predicted_load[3], 30, 1e-9);

  // A cap of 3 extra copies leaves room for one hot expert with two replicas.
  const ReplicationPlan capped = PlanReplication(ranks, load, 3);
  EXPECT_EQ(capped.hot_experts, (std::vector<int>{0}));
  EXPECT_EQ(capped.num_replicas, 2);
  // A cap of 1 also cuts the replicas.
  const ReplicationPlan one = PlanReplication(ranks, load, 1);
  EXPECT_EQ(one.num_replicas, 1);
  EXPECT_EQ(one.hot_experts, (std::vector<int>{0}));
  EXPECT_EQ(one.target_ranks, (std::vector<int>{1}));
}

TEST(GraceTest, BalancedLoadsStillCopyTheHeaviestRank) {
  // rho = 1.2 -> n = 1: experts covering half of the heaviest rank's load.
  const std::vector<std::vector<int>> ranks = {{0, 1}, {2, 3}};
  const ReplicationPlan plan = PlanReplication(ranks, {7, 5, 5, 3}, 0);
  EXPECT_EQ(plan.num_replicas, 1);
  EXPECT_EQ(plan.hot_experts, (std::vector<int>{0}));
  EXPECT_EQ(plan.target_ranks, (std::vector<int>{1}));
}

// Profile of 16 experts in 4 planted cliques {i, i+4, i+8, i+12} of equal load.
LayerProfile FourCliques() {
  LayerProfile p;
  p.layer_id = 5;
  p.num_experts = 16;
  p.load.assign(16, 100.0);
  p.load[3] = 400;  // clique 3 is hot
  p.affinity.assign(256, 1.0);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      if (i == j)
        p.affinity[i * 16 + j] = 0;
      else if (i % 4 == j % 4)
        p.affinity[i * 16 + j] = 50;
    }
  }
  // Cliques 0 and 1 also talk to each other more than to 2 and 3.
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      if (i != j && i % 4 < 2 && j % 4 < 2 && i % 4 != j % 4) p.affinity[i * 16 + j] = 10;
      if (i != j && i % 4 >= 2 && j % 4 >= 2 && i % 4 != j % 4) p.affinity[i * 16 + j] = 10;
    }
  }
  return p;
}

TEST(GraceTest, PlacesCliquesOnRanksAndRelatedCliquesOnMachines) {
  GraceOptions options;
  options.replication = false;
  StatusOr<GraceLayerResult> r = PlaceGraceLayer(FourCliques(), Topology{2, 2}, options);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const LayerPlacement& layer = r->layer;
  EXPECT_EQ(layer.NumExtraCopies(), 0);
  // Every rank holds exactly one clique; cliques 0 and 1 share a machine.
  std::vector<int> rank_of_clique(4, -1);
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_EQ(layer.slots[rank].size(), 4u);
    std::set<int> cliques;
    for (int e : layer.slots[rank]) cliques.insert(e % 4);
    ASSERT_EQ(cliques.size(), 1u);
    rank_of_clique[*cliques.begin()] = rank;
  }
  EXPECT_EQ(rank_of_clique[0] / 2, rank_of_clique[1] / 2);
  EXPECT_EQ(rank_of_clique[2] / 2, rank_of_clique[3] / 2);
  EXPECT_EQ(r->report.machine_sizes, (std::vector<int>{8, 8}));
  ASSERT_EQ(r->report.curves.size(), 2u);
  EXPECT_EQ(r->report.curves[0].curve.size(), options.r_grid.size());
}

TEST(GraceTest, ReplicatesTheHotCliqueWithInverseLoadWeights) {
  StatusOr<GraceLayerResult> r = PlaceGraceLayer(FourCliques(), Topology{2, 2}, GraceOptions{});
  ASSERT_TRUE(r.ok());
  const ReplicationPlan& plan = r->report.replication;
  // Rank loads: 700 for the hot clique, 400 for the others: mean 475, rho 1.47, n = 1; expert
  // 3 (400) covers 700 / 2.
  EXPECT_EQ(plan.num_replicas, 1);
  EXPECT_EQ(plan.hot_experts, (std::vector<int>{3}));
  ASSERT_EQ(plan.target_ranks.size(), 1u);
  const auto& copies = r->layer.copies[3];
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0].rank, plan.heaviest_rank);
  EXPECT_EQ(copies[1].rank, plan.target_ranks[0]);
  // W'_max = 700 - 400 + 200 = 500, W'_t = 400 + 200 = 600: weights 1/500 : 1/600.
  EXPECT_NEAR(copies[0].weight / copies[1].weight, 600.0 / 500.0, 1e-9);
  EXPECT_NEAR(copies[0].weight + copies[1].weight, 1.0, 1e-12);
  EXPECT_EQ(r->layer.NumExtraCopies(), 1);
  const auto& target_slots = r->layer.slots[plan.target_ranks[0]];
  EXPECT_NE(std::find(target_slots.begin(), target_slots.end(), 3), target_slots.end());
}

TEST(GraceTest, ControlledRanksStayWithinBoundsOnASkewedTrace) {
  const ModelShape shape{.name = "s",
                         .num_experts = 32,
                         .top_k = 4,
                         .hidden_size = 64,
                         .moe_intermediate_size = 32,
                         .num_hidden_layers = 2,
                         .num_expert_groups = 1};
  const Trace trace = MakeSyntheticTrace(SyntheticTraceOptions{
      .shape = shape, .num_layers = 1, .num_tokens = 2000, .num_clusters = 4, .seed = 3});
  const LayerProfile profile = ProfileLayer(trace, 0);
  GraceOptions options;
  options.fixed_r = 0.0;  // sizes within E +- 1 on every machine
  options.replication = false;
  StatusOr<GraceLayerResult> r = PlaceGraceLayer(profile, Topology{2, 4}, options);
  ASSERT_TRUE(r.ok()) << r.status().message();
  for (int m = 0; m < 2; ++m) {
    const double target = r->report.machine_sizes[m] / 4.0;
    for (int g = 0; g < 4; ++g) {
      const double size = static_cast<double>(r->layer.slots[m * 4 + g].size());
      EXPECT_LE(std::abs(size - target), 1.0 + 1e-9);
    }
  }
}

}  // namespace
}  // namespace epserve::placement
