// Min-cut grouping pieces: token sets, METIS partition, connectivity refinement and the
// traffic copies, each against small cases worked out by hand or by brute force.
#include "placement/mincut.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

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

}  // namespace
}  // namespace epserve::placement

namespace epserve::placement {
namespace {

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
      for (const Trace* t : {&split->profile, &split->holdout}) {
        StatusOr<Evaluation> a = Evaluate(chosen->placement, *t, EvaluateOptions{});
        StatusOr<Evaluation> b = Evaluate(plain->placement, *t, EvaluateOptions{});
        ASSERT_TRUE(a.ok() && b.ok());
        EXPECT_LE(a->total.time_us, b->total.time_us * (1 + 1e-9))
            << "seed " << seed << " topology " << topo.num_nodes << "x" << topo.ranks_per_node
            << (t == &split->profile ? " profile" : " holdout");
      }
    }
  }
}

}  // namespace
}  // namespace epserve::placement
