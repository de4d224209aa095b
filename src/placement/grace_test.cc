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

TEST(GraceTest, ReplicationOnSharesSkipsTargetsThatHoldTheExpert) {
  // Rank loads 60, 10, 20: mean 30, rho 2, n = 2; expert 0 (share 50) covers 60 * 2 / 3. Of the
  // two least-loaded ranks, rank 1 already holds expert 0, so only rank 2 gets a copy and the
  // 50 is split two ways.
  const std::vector<std::vector<std::pair<int, double>>> shares = {
      {{0, 50}, {1, 10}}, {{0, 10}}, {{2, 20}}};
  const ReplicationPlan plan = PlanReplicationOnShares(shares, 0);
  EXPECT_EQ(plan.heaviest_rank, 0);
  EXPECT_EQ(plan.num_replicas, 2);
  EXPECT_EQ(plan.hot_experts, (std::vector<int>{0}));
  EXPECT_EQ(plan.target_ranks, (std::vector<int>{1, 2}));
  EXPECT_NEAR(plan.predicted_load[0], 35, 1e-9);
  EXPECT_NEAR(plan.predicted_load[1], 10, 1e-9);
  EXPECT_NEAR(plan.predicted_load[2], 45, 1e-9);
  using Shares = std::vector<std::pair<int, double>>;
  EXPECT_EQ(plan.rank_shares[0], (Shares{{0, 25}, {1, 10}}));
  EXPECT_EQ(plan.rank_shares[2], (Shares{{2, 20}, {0, 25}}));
}

TEST(GraceTest, MachineReplicationCopiesTheHeaviestMachinesHotExperts) {
  // 2 machines x 2 ranks. Machine loads 100 (ranks 0, 1) and 30 (ranks 2, 3): mean 65,
  // rho 1.54, n = 1. Machine 0's experts by load: 0 (40), 2 (30) cover 100 / 2. Each copy takes
  // half its expert's load and goes to machine 1's then least-loaded rank: expert 0 to rank 2
  // (10 -> 30), expert 2 to rank 3 (20 -> 35).
  const Topology topo{2, 2};
  const std::vector<std::vector<int>> ranks = {{0, 1}, {2, 3}, {4}, {5}};
  const std::vector<double> load = {40, 20, 30, 10, 10, 20};
  const MachineReplicationPlan plan = PlanMachineReplication(topo, ranks, load, 0);
  EXPECT_EQ(plan.heaviest_node, 0);
  EXPECT_NEAR(plan.rho, 100.0 / 65.0, 1e-12);
  EXPECT_EQ(plan.num_replicas, 1);
  EXPECT_EQ(plan.hot_experts, (std::vector<int>{0, 2}));
  EXPECT_EQ(plan.target_nodes, (std::vector<int>{1}));
  EXPECT_EQ(plan.copies, (std::vector<std::pair<int, int>>{{0, 2}, {2, 3}}));
  // W_r = 70: W'_0 = 100 - 70 + 35, W'_1 = 30 + 35.
  EXPECT_NEAR(plan.predicted_node_load[0], 65, 1e-9);
  EXPECT_NEAR(plan.predicted_node_load[1], 65, 1e-9);
  using Shares = std::vector<std::pair<int, double>>;
  EXPECT_EQ(plan.rank_shares[0], (Shares{{0, 20}, {1, 20}}));
  EXPECT_EQ(plan.rank_shares[1], (Shares{{2, 15}, {3, 10}}));
  EXPECT_EQ(plan.rank_shares[2], (Shares{{4, 10}, {0, 20}}));
  EXPECT_EQ(plan.rank_shares[3], (Shares{{5, 20}, {2, 15}}));

  // A cap of one extra copy keeps the hottest expert only.
  const MachineReplicationPlan capped = PlanMachineReplication(topo, ranks, load, 1);
  EXPECT_EQ(capped.hot_experts, (std::vector<int>{0}));
  EXPECT_EQ(capped.copies, (std::vector<std::pair<int, int>>{{0, 2}}));
  // One machine: nothing to copy to.
  const MachineReplicationPlan single = PlanMachineReplication(Topology{1, 4}, ranks, load, 0);
  EXPECT_EQ(single.heaviest_node, -1);
  EXPECT_TRUE(single.copies.empty());
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
  GraceOptions options;
  options.machine_replication = false;  // the rank-level step of SPEC §8 alone
  options.rank_rebalance = false;       // and its weights, not the rebalanced ones
  StatusOr<GraceLayerResult> r = PlaceGraceLayer(FourCliques(), Topology{2, 2}, options);
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

TEST(GraceTest, MachineLevelStepCopiesTheHotMachinesExpertsToTheOtherMachine) {
  // Machine loads: cliques 2 and 3 (1100), cliques 0 and 1 (800); mean 950, rho 1.16, n = 1.
  // The hot machine's experts by load (ties: lower id) 3 (400), 2, 6 (100 each) cover 550.
  StatusOr<GraceLayerResult> r = PlaceGraceLayer(FourCliques(), Topology{2, 2}, GraceOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const MachineReplicationPlan& mplan = r->report.machine_replication;
  ASSERT_GE(mplan.heaviest_node, 0);
  EXPECT_EQ(mplan.num_replicas, 1);
  EXPECT_EQ(mplan.hot_experts, (std::vector<int>{3, 2, 6}));
  ASSERT_EQ(mplan.target_nodes.size(), 1u);
  EXPECT_NE(mplan.target_nodes[0], mplan.heaviest_node);
  // W_r = 600: W'_hot = 1100 - 600 + 300, W'_other = 800 + 300.
  EXPECT_NEAR(mplan.predicted_node_load[mplan.heaviest_node], 800, 1e-9);
  EXPECT_NEAR(mplan.predicted_node_load[mplan.target_nodes[0]], 1100, 1e-9);
  ASSERT_EQ(mplan.copies.size(), 3u);
  for (const auto& [e, rank] : mplan.copies) {
    EXPECT_EQ(rank / 2, mplan.target_nodes[0]);
    // The copy is in the layer, after the original.
    ASSERT_GE(r->layer.copies[e].size(), 2u);
    EXPECT_EQ(r->layer.copies[e][0].rank / 2, mplan.heaviest_node);
  }
  // Expert 3 (share 200) goes to one of the target machine's two equal ranks, experts 2 and 6
  // (50 each) to the other, which is then lighter.
  EXPECT_NE(mplan.copies[0].second, mplan.copies[1].second);
  EXPECT_EQ(mplan.copies[1].second, mplan.copies[2].second);
  // Then the rank-level step on the predicted loads, and the layer stays valid.
  Placement p;
  p.topology = Topology{2, 2};
  p.model.num_experts = 16;
  p.model.top_k = 2;
  p.layers.push_back(r->layer);
  EXPECT_TRUE(ValidatePlacement(p).ok());
  EXPECT_GE(r->layer.NumExtraCopies(), 3);
  // Without the machine-level step, only the rank-level copies are made.
  GraceOptions no_machine;
  no_machine.machine_replication = false;
  StatusOr<GraceLayerResult> only_ranks =
      PlaceGraceLayer(FourCliques(), Topology{2, 2}, no_machine);
  ASSERT_TRUE(only_ranks.ok());
  EXPECT_EQ(only_ranks->report.machine_replication.heaviest_node, -1);
  EXPECT_EQ(only_ranks->layer.NumExtraCopies(), 1);
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
