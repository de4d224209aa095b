#include "placement/rebalance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <vector>

#include "placement/grace.h"
#include "placement/synthetic.h"

namespace epserve::placement {
namespace {

TEST(RebalanceTest, PredictsWhereTheRouterSendsTokens) {
  // 2 machines x 3 ranks; each source rank holds 1/6 of every expert's load.
  const Topology topo{2, 3};
  LayerPlacement layer;
  layer.slots = {{0, 2}, {0}, {1, 2}, {}, {0}, {}};
  layer.copies = {{{.rank = 0, .weight = 1}, {.rank = 1, .weight = 3}, {.rank = 4, .weight = 2}},
                  {{.rank = 2, .weight = 1}},
                  {{.rank = 0, .weight = 1}, {.rank = 2, .weight = 1}}};
  const std::vector<double> load = {60, 12, 6};
  // topo. Expert 0 (10 per source): ranks 0, 1, 4 keep their own 10; rank 2 splits 1:3 over
  // ranks 0 and 1; ranks 3 and 5 go to rank 4, their machine's copy. Expert 2 (1 per source):
  // ranks 0 and 2 keep theirs, rank 1 splits 1:1, machine 1 (3) has no copy and splits 1:1.
  const std::vector<double> topo_load =
      PredictRankLoads(layer, load, topo, RoutingPolicy::kTopology);
  const std::vector<double> want_topo = {
      10 + 2.5 + 1 + 0.5 + 1.5, 10 + 7.5, 12 + 1 + 0.5 + 1.5, 0, 30, 0};
  ASSERT_EQ(topo_load.size(), want_topo.size());
  for (size_t r = 0; r < want_topo.size(); ++r) EXPECT_NEAR(topo_load[r], want_topo[r], 1e-9) << r;
  // wrr: every copy takes its weight's share of everything.
  const std::vector<double> wrr = PredictRankLoads(layer, load, topo, RoutingPolicy::kWeighted);
  const std::vector<double> want_wrr = {10 + 3, 30, 12 + 3, 0, 20, 0};
  for (size_t r = 0; r < want_wrr.size(); ++r) EXPECT_NEAR(wrr[r], want_wrr[r], 1e-9) << r;
}

// 2 machines x 2 ranks, one copy per expert. Machine 0 is unbalanced (rank 0: 50 + 30 + 20,
// rank 1: 10 + 10); machine 1 is even (30 + 30 against 60).
LayerPlacement Unbalanced() { return LayerFromSlots(1, 8, {{0, 1, 2}, {3, 4}, {5, 6}, {7}}); }
const std::vector<double> kLoad = {50, 30, 20, 10, 10, 30, 30, 60};

TEST(RebalanceTest, EvensOutTheRanksOfAMachine) {
  LayerPlacement layer = Unbalanced();
  const RebalanceReport report =
      RebalanceRanks(&layer, kLoad, Topology{2, 2}, RoutingPolicy::kTopology);
  // Moving expert 0 or 1 to rank 1 leaves 70 on one rank; swapping expert 0 (50) for expert 3
  // (10) leaves 60 and 60, the mean, so nothing better exists.
  EXPECT_EQ(layer.slots[0], (std::vector<int>{3, 1, 2}));
  EXPECT_EQ(layer.slots[1], (std::vector<int>{0, 4}));
  EXPECT_EQ(layer.slots[2], (std::vector<int>{5, 6}));  // machine 1 untouched
  EXPECT_EQ(layer.slots[3], (std::vector<int>{7}));
  EXPECT_EQ(report.swaps, 1);
  EXPECT_EQ(report.moves, 0);
  EXPECT_NEAR(report.max_over_mean_before, 100.0 / 60.0, 1e-12);
  EXPECT_NEAR(report.max_over_mean_after, 1.0, 1e-12);
  ASSERT_EQ(layer.copies[0].size(), 1u);
  EXPECT_EQ(layer.copies[0][0].rank, 1);
  EXPECT_EQ(layer.copies[3][0].rank, 0);
  Placement p;
  p.topology = Topology{2, 2};
  p.model.num_experts = 8;
  p.model.top_k = 2;
  p.layers.push_back(layer);
  EXPECT_TRUE(ValidatePlacement(p).ok());
}

TEST(RebalanceTest, MovesWithinTheSlotCountsAndSpreadsAReplicatedExpert) {
  // One machine of two ranks with 3 and 1 slots: moves may not leave a rank with fewer than 1 or
  // more than 3. Expert 0 (load 40) has copies on both ranks; under topo each keeps its own
  // rank's half, so the copies carry 20 each whatever their weights. Rank 0: 20 + 30 + 30 = 80,
  // rank 1: 20. Moving expert 1 or 2 over gives 50 / 50.
  LayerPlacement layer;
  layer.slots = {{0, 1, 2}, {0}};
  layer.copies = {{{.rank = 0, .weight = 0.9}, {.rank = 1, .weight = 0.1}},
                  {{.rank = 0, .weight = 1}},
                  {{.rank = 0, .weight = 1}}};
  const std::vector<double> load = {40, 30, 30};
  const RebalanceReport report =
      RebalanceRanks(&layer, load, Topology{1, 2}, RoutingPolicy::kTopology);
  EXPECT_EQ(report.moves, 1);
  EXPECT_EQ(report.swaps, 0);
  EXPECT_EQ(layer.slots[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(layer.slots[1], (std::vector<int>{0, 1}));
  EXPECT_NEAR(report.max_over_mean_after, 1.0, 1e-12);
  // Under wrr the same copies carry 36 and 4: rank 0 96, rank 1 4. Moving 1 (30) gives 66 / 34,
  // then moving 2 gives 36 / 64 (rank 1 now at the 3-slot limit, and no swap helps).
  layer.slots = {{0, 1, 2}, {0}};
  layer.copies = {{{.rank = 0, .weight = 0.9}, {.rank = 1, .weight = 0.1}},
                  {{.rank = 0, .weight = 1}},
                  {{.rank = 0, .weight = 1}}};
  const RebalanceReport wrr =
      RebalanceRanks(&layer, load, Topology{1, 2}, RoutingPolicy::kWeighted);
  EXPECT_EQ(wrr.moves, 2);
  EXPECT_EQ(layer.slots[0], (std::vector<int>{0}));
  EXPECT_EQ(layer.slots[1], (std::vector<int>{0, 1, 2}));
  EXPECT_NEAR(wrr.max_over_mean_after, 64.0 / 50.0, 1e-12);
  // A rank never gets a second copy of an expert: expert 0 stays once on each rank.
  for (const auto& slots : layer.slots) EXPECT_EQ(std::count(slots.begin(), slots.end(), 0), 1);
}

TEST(RebalanceTest, BalancedMachinesAreLeftAlone) {
  LayerPlacement layer = LayerFromSlots(1, 4, {{0, 1}, {2, 3}});
  const RebalanceReport report =
      RebalanceRanks(&layer, {10, 20, 15, 15}, Topology{1, 2}, RoutingPolicy::kTopology);
  EXPECT_EQ(report.moves + report.swaps, 0);
  EXPECT_EQ(layer.slots, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
}

// Per expert, the machines holding it (with multiplicity): what cross-machine traffic depends on.
std::map<int, std::vector<int>> MachinesOf(const LayerPlacement& layer, const Topology& topo) {
  std::map<int, std::vector<int>> m;
  for (size_t e = 0; e < layer.copies.size(); ++e) {
    for (const ExpertCopy& c : layer.copies[e]) m[e].push_back(topo.NodeOf(c.rank));
    std::sort(m[e].begin(), m[e].end());
  }
  return m;
}

TEST(RebalanceTest, GraceStepKeepsMachinesAndSlotCountsAndCanBeSwitchedOff) {
  const ModelShape shape{.name = "s",
                         .num_experts = 64,
                         .top_k = 6,
                         .hidden_size = 64,
                         .moe_intermediate_size = 32,
                         .num_hidden_layers = 2,
                         .num_expert_groups = 1};
  const Trace trace = MakeSyntheticTrace(SyntheticTraceOptions{.shape = shape,
                                                               .num_layers = 1,
                                                               .num_tokens = 4000,
                                                               .num_clusters = 8,
                                                               .skew = 1.2,
                                                               .seed = 5});
  const LayerProfile profile = ProfileLayer(trace, 0);
  const Topology topo{2, 4};
  GraceOptions off;
  off.rank_rebalance = false;
  StatusOr<GraceLayerResult> before = PlaceGraceLayer(profile, topo, off);
  StatusOr<GraceLayerResult> after = PlaceGraceLayer(profile, topo, GraceOptions{});
  ASSERT_TRUE(before.ok() && after.ok());
  EXPECT_EQ(before->report.rebalance.max_over_mean_before, 0);  // switched off: no report
  const RebalanceReport& r = after->report.rebalance;
  EXPECT_GT(r.moves + r.swaps, 0);
  EXPECT_LT(r.max_over_mean_after, r.max_over_mean_before);
  // Same copies per layer, same machines per expert, and slot counts within each machine's
  // smallest and largest before.
  EXPECT_EQ(after->layer.NumExtraCopies(), before->layer.NumExtraCopies());
  EXPECT_EQ(MachinesOf(after->layer, topo), MachinesOf(before->layer, topo));
  for (int m = 0; m < 2; ++m) {
    size_t lo = 1000, hi = 0;
    for (int r = m * 4; r < m * 4 + 4; ++r) {
      lo = std::min(lo, before->layer.slots[r].size());
      hi = std::max(hi, before->layer.slots[r].size());
    }
    for (int r = m * 4; r < m * 4 + 4; ++r) {
      EXPECT_GE(after->layer.slots[r].size(), lo);
      EXPECT_LE(after->layer.slots[r].size(), hi);
    }
  }
  Placement p;
  p.topology = topo;
  p.model = shape;
  p.layers.push_back(after->layer);
  EXPECT_TRUE(ValidatePlacement(p).ok());
  // The predicted slowest rank is lighter than without the step.
  const auto max_of = [&](const LayerPlacement& l) {
    const std::vector<double> v = PredictRankLoads(l, profile.load, topo, RoutingPolicy::kTopology);
    return *std::max_element(v.begin(), v.end());
  };
  EXPECT_LT(max_of(after->layer), max_of(before->layer));
}

}  // namespace
}  // namespace epserve::placement
