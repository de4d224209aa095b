// Min-cut grouping pieces: token sets, METIS partition, connectivity refinement and the
// traffic copies, each against small cases worked out by hand or by brute force.
#include "placement/mincut.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "placement/grace_mincut.h"
#include "placement/place.h"
#include "placement/refine.h"
#include "placement/synthetic.h"
#include "placement/token_sets.h"
#include "placement/traffic_copies.h"

namespace epserve::placement {
namespace {

TEST(TokenSetsTest, MergesEqualSetsWhateverTheOrder) {
  const TokenSets sets = TokenSets::FromSets(4, 2, {0, 1, 1, 0, 2, 3, 3, 1}, {1, 2, 1, 1});
  // Rows as given (FromSets does not merge): {0,1}, {0,1}, {2,3}, {1,3}.
  EXPECT_EQ(sets.num_sets(), 4);
  EXPECT_EQ(sets.Set(1)[0], 0);
  EXPECT_EQ(sets.Set(1)[1], 1);
  EXPECT_EQ(sets.SetsOf(1).size(), 3u);
  EXPECT_DOUBLE_EQ(sets.total_count(), 5);
  // Connectivity: parts {0,1} | {2,3}: 1 + 2 + 1 + 2 * 1 (set {1,3} spans both).
  EXPECT_DOUBLE_EQ(Connectivity(sets, {0, 0, 1, 1}, 2), 1 + 2 + 1 + 2);
  // Experts left out count for no part.
  EXPECT_DOUBLE_EQ(Connectivity(sets, {0, 0, -1, 1}, 2), 1 + 2 + 1 + 2);
  EXPECT_DOUBLE_EQ(Connectivity(sets, {0, -1, -1, -1}, 2), 1 + 2);
}

// Two planted clusters of 4 experts: every set lies inside one, except a few that bridge.
TokenSets Planted() {
  std::vector<uint16_t> experts;
  std::vector<double> count;
  std::mt19937 rng(5);
  for (int i = 0; i < 200; ++i) {
    const int base = (i % 2) * 4;
    uint16_t a = base + rng() % 4, b = base + rng() % 4;
    if (a == b) b = base + (a - base + 1) % 4;
    experts.insert(experts.end(), {a, b});
    count.push_back(1 + rng() % 3);
  }
  experts.insert(experts.end(), {3, 4});
  count.push_back(1);
  return TokenSets::FromSets(8, 2, experts, count);
}

TEST(RefineTest, FindsThePlantedSplitFromAnInterleavedStart) {
  const TokenSets sets = Planted();
  std::vector<int> part = {0, 1, 0, 1, 0, 1, 0, 1};
  const RefineResult r = RefineConnectivity(
      sets,
      RefineOptions{.num_parts = 2, .weight = std::vector<double>(8, 1.0), .max_part_weight = 4},
      &part);
  EXPECT_LT(r.after, r.before);
  EXPECT_DOUBLE_EQ(r.after, Connectivity(sets, part, 2));
  // The planted split: only the bridging set spans two parts.
  EXPECT_DOUBLE_EQ(r.after, sets.total_count() + 1);
  for (int e = 1; e < 4; ++e) EXPECT_EQ(part[e], part[0]);
  for (int e = 5; e < 8; ++e) EXPECT_EQ(part[e], part[4]);
}

TEST(RefineTest, NeverWorseAndKeepsTheBounds) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 12, k = 3;
    std::vector<uint16_t> experts;
    std::vector<double> count;
    for (int i = 0; i < 60; ++i) {
      std::vector<uint16_t> s(n);
      for (int e = 0; e < n; ++e) s[e] = e;
      std::shuffle(s.begin(), s.end(), rng);
      experts.insert(experts.end(), s.begin(), s.begin() + k);
      count.push_back(1 + rng() % 5);
    }
    const TokenSets sets = TokenSets::FromSets(n, k, experts, count);
    std::vector<double> weight(n);
    for (double& w : weight) w = 1 + rng() % 10;
    std::vector<int> part(n);
    for (int e = 0; e < n; ++e) part[e] = e % 3;
    std::vector<double> load(3, 0);
    for (int e = 0; e < n; ++e) load[part[e]] += weight[e];
    const double cap = std::max(*std::max_element(load.begin(), load.end()), 30.0);
    const RefineResult r = RefineConnectivity(sets,
                                              RefineOptions{.num_parts = 3,
                                                            .weight = weight,
                                                            .max_part_weight = cap,
                                                            .min_part_size = 3,
                                                            .max_part_size = 5,
                                                            .check_gains = true},
                                              &part);
    EXPECT_LE(r.after, r.before);
    EXPECT_DOUBLE_EQ(r.after, Connectivity(sets, part, 3));
    std::vector<int> size(3, 0);
    std::fill(load.begin(), load.end(), 0);
    for (int e = 0; e < n; ++e) {
      ++size[part[e]];
      load[part[e]] += weight[e];
    }
    for (int p = 0; p < 3; ++p) {
      EXPECT_GE(size[p], 3);
      EXPECT_LE(size[p], 5);
      EXPECT_LE(load[p], cap + 1e-9);
    }
  }
}

TEST(MinCutTest, SplitsTwoCliquesJoinedByOneEdge) {
  const int n = 8;
  std::vector<double> a(n * n, 0);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i != j && i / 4 == j / 4) a[i * n + j] = 10;
    }
  }
  a[3 * n + 4] = a[4 * n + 3] = 1;
  StatusOr<MinCutResult> r = MinCutPartition(
      a, n,
      MinCutOptions{
          .num_parts = 2, .constraints = {std::vector<double>(n, 1.0)}, .imbalance = {1.01}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_DOUBLE_EQ(r->cut, 1);
  for (int e = 1; e < 4; ++e) EXPECT_EQ(r->part[e], r->part[0]);
  for (int e = 5; e < 8; ++e) EXPECT_EQ(r->part[e], r->part[4]);
  EXPECT_NE(r->part[0], r->part[4]);
  EXPECT_FALSE(MinCutPartition(a, n, MinCutOptions{.num_parts = 2}).ok());  // no constraint
}

TEST(TrafficCopiesTest, CopiesTheExpertThatKeepsMostTokensHome) {
  // 2 machines: experts 0, 1 on machine 0; 2, 3 on machine 1. Sets {0,2} x 6, {1,3} x 2,
  // {0,1} x 4; a token is on either machine with probability 1/2. A copy of 0 on machine 1
  // keeps machine 1's {0,2} tokens home (6 / 2 = 3 saved; its {0,1} tokens still need 1), and
  // so does a copy of 2 on machine 0.
  const TokenSets sets = TokenSets::FromSets(4, 2, {0, 2, 1, 3, 0, 1}, {6, 2, 4});
  const TrafficCopiesOptions options{.num_nodes = 2,
                                     .home = {0, 0, 1, 1},
                                     .load = {10, 6, 6, 2},
                                     .max_copies = 1,
                                     .max_node_load = 100};
  const TrafficCopiesResult r = PlanTrafficCopies(sets, options);
  // Before: {0,2} and {1,3} need the other machine from both sides (expected 6 + 2), {0,1}
  // from machine 1's side only (4 / 2).
  EXPECT_DOUBLE_EQ(r.cross_before, 10);
  ASSERT_EQ(r.copies.size(), 1u);
  EXPECT_DOUBLE_EQ(r.copies[0].saved, 3);
  EXPECT_DOUBLE_EQ(r.cross_after, 7);
  EXPECT_TRUE((r.copies[0].expert == 0 && r.copies[0].node == 1) ||
              (r.copies[0].expert == 2 && r.copies[0].node == 0));
  // Predicted loads: machine 0 had 16, machine 1 had 8; the copy moves half its expert's load.
  EXPECT_DOUBLE_EQ(r.node_load[0] + r.node_load[1], 24);
  // Under a bound of 0 only copies that even the two machines out may go: 0 onto machine 1
  // (8 + 5 < 16), not 2 onto machine 0 (16 + 3 > 8).
  TrafficCopiesOptions tight = options;
  tight.max_node_load = 0;
  tight.max_copies = 3;
  const TrafficCopiesResult bound = PlanTrafficCopies(sets, tight);
  ASSERT_FALSE(bound.copies.empty());
  EXPECT_EQ(bound.copies[0].expert, 0);
  EXPECT_EQ(bound.copies[0].node, 1);
  for (const TrafficCopy& c : bound.copies) EXPECT_NE(c.expert, 2);
}

TEST(TrafficCopiesTest, ACopyOnAMachineTheTokenVisitsAnywaySavesToo) {
  // 3 machines, expert e at home on machine e; set {1, 2} x 3 tokens, one on each machine. From
  // machine 0 a token visits 1 and 2; a copy of 1 on machine 2 (or of 2 on 1) lets it visit one
  // machine (the router sends an expert to a machine the token visits anyway) and keeps machine
  // 2's (1's) token home: 2 saved, where a copy on machine 0 saves only machine 0's token.
  const TokenSets sets = TokenSets::FromSets(3, 2, {1, 2}, {3});
  const TrafficCopiesOptions options{
      .num_nodes = 3, .home = {0, 1, 2}, .load = {0, 3, 3}, .max_copies = 1, .max_node_load = 100};
  const TrafficCopiesResult r = PlanTrafficCopies(sets, options);
  EXPECT_DOUBLE_EQ(r.cross_before, 4);  // 2 from machine 0, 1 each from machines 1 and 2
  ASSERT_EQ(r.copies.size(), 1u);
  EXPECT_DOUBLE_EQ(r.copies[0].saved, 2);
  EXPECT_DOUBLE_EQ(r.cross_after, 2);
  EXPECT_TRUE((r.copies[0].expert == 1 && r.copies[0].node == 2) ||
              (r.copies[0].expert == 2 && r.copies[0].node == 1));
  // The loads are the router's: all 6 token-expert pairs; the copy's machine serves both of its
  // own token's, both of machine 0's and one of the other machine's.
  EXPECT_DOUBLE_EQ(r.node_load[0] + r.node_load[1] + r.node_load[2], 6);
  EXPECT_DOUBLE_EQ(r.node_load[0], 0);
  EXPECT_DOUBLE_EQ(r.node_load[r.copies[0].node], 5);
}

// One machine, 2 ranks, experts chosen in pairs {0, 1} x 30 and {2, 3} x 30 (every load 30):
// split by load, each rank gets one expert of each pair (each step's tokens, which share
// prompts, spread over both ranks); split by affinity, each pair shares a rank.
TEST(GraceMinCutTest, RanksSplitByLoadSpreadCoActivatedExperts) {
  const TokenSets sets = TokenSets::FromSets(4, 2, {0, 1, 2, 3}, {30, 30});
  LayerProfile profile{.layer_id = 1, .num_experts = 4, .load = {30, 30, 30, 30}};
  profile.affinity.assign(16, 0.0);
  profile.affinity[0 * 4 + 1] = profile.affinity[1 * 4 + 0] = 30;
  profile.affinity[2 * 4 + 3] = profile.affinity[3 * 4 + 2] = 30;
  GraceOptions options;
  options.replication = false;
  options.rank_rebalance = false;
  auto rank_of = [](const LayerPlacement& layer, int e) { return layer.copies[e][0].rank; };
  StatusOr<GraceLayerResult> by_load =
      PlaceGraceMinCutLayer(profile, sets, Topology{1, 2}, options);
  ASSERT_TRUE(by_load.ok()) << by_load.status().message();
  EXPECT_NE(rank_of(by_load->layer, 0), rank_of(by_load->layer, 1));
  EXPECT_NE(rank_of(by_load->layer, 2), rank_of(by_load->layer, 3));
  options.rank_grouping = RankGrouping::kAffinity;
  StatusOr<GraceLayerResult> by_affinity =
      PlaceGraceMinCutLayer(profile, sets, Topology{1, 2}, options);
  ASSERT_TRUE(by_affinity.ok()) << by_affinity.status().message();
  EXPECT_EQ(rank_of(by_affinity->layer, 0), rank_of(by_affinity->layer, 1));
  EXPECT_EQ(rank_of(by_affinity->layer, 2), rank_of(by_affinity->layer, 3));
}

}  // namespace
}  // namespace epserve::placement

namespace epserve::placement {
namespace {

// Layers are placed in parallel; the placement must not depend on how many threads do it (METIS
// keeps one process-wide random state, so concurrent calls once made it depend on timing).
TEST(ChooseByModelTest, PlacementDoesNotDependOnTheThreadCount) {
  const ModelShape shape{.name = "mid",
                         .num_experts = 32,
                         .top_k = 4,
                         .hidden_size = 1024,
                         .moe_intermediate_size = 512,
                         .num_hidden_layers = 9};
  const Trace trace = MakeSyntheticTrace(SyntheticTraceOptions{.shape = shape,
                                                               .num_layers = 8,
                                                               .num_tokens = 4096,
                                                               .num_sequences = 64,
                                                               .num_clusters = 4,
                                                               .in_cluster = 0.7,
                                                               .seed = 5});
  auto place = [&](int threads) {
    PlaceOptions options{.topology = Topology{4, 2}, .strategy = Strategy::kGrace};
    options.num_threads = threads;
    StatusOr<PlaceResult> r = Place(trace, options);
    EXPECT_TRUE(r.ok()) << r.status().message();
    std::vector<std::vector<std::vector<int>>> slots;
    for (const LayerPlacement& l : r->placement.layers) slots.push_back(l.slots);
    return slots;
  };
  const auto one = place(1);
  for (int round = 0; round < 3; ++round) EXPECT_EQ(place(4), one) << "round " << round;
}

// A small-expert model: the chosen placement (grace, selected by the modeled time on the
// profile) is never slower than contiguous, on the profile by construction and on a held-out
// half drawn from the same distribution, over several seeds and topologies.
TEST(ChooseByModelTest, SmallExpertModelNeverSlowerThanContiguous) {
  const ModelShape shape{.name = "small",
                         .num_experts = 8,
                         .top_k = 2,
                         .hidden_size = 1024,
                         .moe_intermediate_size = 512,
                         .num_hidden_layers = 5};
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    const Trace trace = MakeSyntheticTrace(SyntheticTraceOptions{.shape = shape,
                                                                 .num_layers = 4,
                                                                 .num_tokens = 4096,
                                                                 .num_sequences = 64,
                                                                 .num_clusters = 2,
                                                                 .in_cluster = 0.8,
                                                                 .seed = seed});
    StatusOr<TraceSplit> split = SplitTrace(trace, 0.5);
    ASSERT_TRUE(split.ok());
    for (const Topology topo : {Topology{2, 2}, Topology{2, 4}, Topology{4, 2}}) {
      PlaceOptions grace{.topology = topo, .strategy = Strategy::kGrace};
      StatusOr<PlaceResult> chosen = Place(split->profile, grace);
      ASSERT_TRUE(chosen.ok()) << chosen.status().message();
      ASSERT_EQ(chosen->choice.chosen.size(), 4u);
      PlaceOptions contiguous{.topology = topo, .strategy = Strategy::kContiguous};
      contiguous.routing = RoutingPolicy::kTopology;
      StatusOr<PlaceResult> plain = Place(split->profile, contiguous);
      ASSERT_TRUE(plain.ok());
      // On the profile the selection compares the mean over its deals of the prompts to the
      // ranks (by construction not slower); on the holdout, the one deal in trace order.
      for (const Trace* t : {&split->profile, &split->holdout}) {
        const int deals = t == &split->profile ? grace.selection_deals : 1;
        double a_us = 0, b_us = 0;
        for (int d = 0; d < deals; ++d) {
          const EvaluateOptions eval{.deal_seed = static_cast<uint64_t>(d)};
          StatusOr<Evaluation> a = Evaluate(chosen->placement, *t, eval);
          StatusOr<Evaluation> b = Evaluate(plain->placement, *t, eval);
          ASSERT_TRUE(a.ok() && b.ok());
          a_us += a->total.time_us;
          b_us += b->total.time_us;
        }
        EXPECT_LE(a_us, b_us * (1 + 1e-9))
            << "seed " << seed << " topology " << topo.num_nodes << "x" << topo.ranks_per_node
            << (t == &split->profile ? " profile" : " holdout");
      }
    }
  }
}

}  // namespace
}  // namespace epserve::placement
