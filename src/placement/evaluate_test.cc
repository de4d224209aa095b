#include "placement/evaluate.h"

#include <gtest/gtest.h>

#include "placement/compare.h"
#include "placement/place.h"
#include "placement/synthetic.h"

namespace epserve::placement {
namespace {

ModelShape Shape() {
  return ModelShape{.name = "t",
                    .num_experts = 4,
                    .top_k = 2,
                    .hidden_size = 1000,
                    .moe_intermediate_size = 1000,
                    .num_hidden_layers = 2,
                    .num_expert_groups = 1};
}

// 2 machines x 2 ranks, expert e on rank e. Three one-token sequences, on ranks 0, 1, 2:
//   seq 0 on rank 0 -> experts 0, 1: kept (rank 0), within machine (rank 1)
//   seq 1 on rank 1 -> experts 2, 3: two ranks on machine 1, one machine copy; it arrives on
//                      rank 3 (rank 1's peer) and is forwarded to rank 2 over NVLink
//   seq 2 on rank 2 -> experts 0, 2: kept (rank 2), across to rank 0, which is its peer
TEST(EvaluateTest, CountsCopiesLoadsAndModeledTime) {
  Trace trace(Shape(), {1}, GateWeights::kAbsent);
  const uint16_t t0[] = {0, 1}, t1[] = {2, 3}, t2[] = {0, 2};
  ASSERT_TRUE(trace.AddToken(10, 0, t0, nullptr).ok());
  ASSERT_TRUE(trace.AddToken(11, 0, t1, nullptr).ok());
  ASSERT_TRUE(trace.AddToken(12, 0, t2, nullptr).ok());
  Placement p;
  p.topology = Topology{2, 2};
  p.model = Shape();
  p.layers.push_back(PlaceContiguousLayer(1, 4, 4));

  EvaluateOptions options;
  options.cost = CostModel{.expert_tflops = 1,
                           .hbm_gbytes_per_s = 1000,
                           .ib_gbytes_per_s = 1,
                           .nvlink_gbytes_per_s = 1,
                           .activation_bytes = 2,
                           .weight_bytes = 2};
  StatusOr<Evaluation> eval = Evaluate(p, trace, options);
  ASSERT_TRUE(eval.ok()) << eval.status().message();
  ASSERT_EQ(eval->layers.size(), 1u);
  const LayerEvaluation& l = eval->layers[0];
  EXPECT_EQ(l.traffic.rank_local, 2);
  EXPECT_EQ(l.traffic.rank_intra, 1);
  EXPECT_EQ(l.traffic.rank_cross, 3);
  EXPECT_EQ(l.traffic.machine_local, 2);
  EXPECT_EQ(l.traffic.machine_cross, 2);
  EXPECT_DOUBLE_EQ(l.traffic.cross_bytes, 2 * 2000.0);
  EXPECT_DOUBLE_EQ(l.traffic.nvlink_bytes, 2 * 2000.0);  // rank 0 -> 1, forward 3 -> 2
  // Token-expert pairs per rank: 2, 1, 2, 1.
  EXPECT_DOUBLE_EQ(l.load.max, 2);
  EXPECT_DOUBLE_EQ(l.load.mean, 1.5);
  EXPECT_DOUBLE_EQ(l.load.stddev, 0.5);
  EXPECT_DOUBLE_EQ(l.load.idle_fraction, 0.25);
  // Expert work: per token 6e6 flop / 1e12 = 6 us; weights 6e6 B / 1e12 B/s = 6 us; rank 0
  // has expert 0 with 2 tokens: max(12, 6) = 12 us. IB: one copy per machine each way,
  // 2000 B / 2 GB/s = 1 us, twice. NVLink: one copy per rank at most, 2 us, twice.
  EXPECT_NEAR(l.compute_us, 12.0, 1e-9);
  EXPECT_NEAR(l.ib_us, 2.0, 1e-9);
  EXPECT_NEAR(l.nvlink_us, 4.0, 1e-9);
  EXPECT_NEAR(l.time_us, 18.0, 1e-9);
  EXPECT_NEAR(eval->total.time_us, 18.0, 1e-9);
  EXPECT_EQ(eval->num_steps, 1);
}

TEST(EvaluateTest, StepsSplitEachRanksTokens) {
  Trace trace(Shape(), {1}, GateWeights::kAbsent);
  const uint16_t e[] = {0, 1};
  for (uint32_t pos = 0; pos < 5; ++pos) ASSERT_TRUE(trace.AddToken(0, pos, e, nullptr).ok());
  Placement p;
  p.topology = Topology{1, 2};
  p.model = Shape();
  p.layers.push_back(PlaceContiguousLayer(1, 4, 2));
  EvaluateOptions options;
  options.step_tokens_per_rank = 2;
  StatusOr<Evaluation> eval = Evaluate(p, trace, options);
  ASSERT_TRUE(eval.ok());
  EXPECT_EQ(eval->num_steps, 3);  // 5 tokens of rank 0 in steps of 2
  EXPECT_EQ(eval->total.traffic.rank_local, 5);
}

TEST(EvaluateTest, ADealSeedDealsTheSameSequencesToOtherRanks) {
  // 8 one-token sequences on 2 x 1 ranks (rank 0 holds experts 0-1, rank 1 experts 2-3):
  // sequences 0-3 use experts {0, 1}, 4-7 use {2, 3}. In trace order sequence i starts on rank
  // i % 2, so half of each kind stays home.
  Trace trace(Shape(), {1}, GateWeights::kAbsent);
  for (uint32_t seq = 0; seq < 8; ++seq) {
    const uint16_t lo[] = {0, 1}, hi[] = {2, 3};
    ASSERT_TRUE(trace.AddToken(seq, 0, seq < 4 ? lo : hi, nullptr).ok());
  }
  Placement p;
  p.topology = Topology{2, 1};
  p.model = Shape();
  p.layers.push_back(PlaceContiguousLayer(1, 4, 2));
  StatusOr<Evaluation> in_order = Evaluate(p, trace, EvaluateOptions{});
  ASSERT_TRUE(in_order.ok());
  EXPECT_EQ(in_order->total.traffic.machine_local, 4);
  EXPECT_EQ(in_order->total.traffic.machine_cross, 4);
  bool other_deal = false;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    StatusOr<Evaluation> dealt = Evaluate(p, trace, EvaluateOptions{.deal_seed = seed});
    ASSERT_TRUE(dealt.ok());
    // The same tokens, four per rank, each needing one machine.
    EXPECT_EQ(dealt->total.traffic.machine_cross + dealt->total.traffic.machine_local, 8);
    EXPECT_DOUBLE_EQ(dealt->total.load.mean, in_order->total.load.mean);
    StatusOr<Evaluation> again = Evaluate(p, trace, EvaluateOptions{.deal_seed = seed});
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->total.traffic.machine_local, dealt->total.traffic.machine_local);
    other_deal |= dealt->total.traffic.machine_local != in_order->total.traffic.machine_local;
  }
  EXPECT_TRUE(other_deal) << "no seed dealt the sequences differently";
}

TEST(EvaluateTest, RejectsMismatchedTrace) {
  Trace trace(Shape(), {1}, GateWeights::kAbsent);
  const uint16_t e[] = {0, 1};
  ASSERT_TRUE(trace.AddToken(0, 0, e, nullptr).ok());
  Placement p;
  p.topology = Topology{1, 2};
  p.model = Shape();
  p.model.num_experts = 8;
  p.layers.push_back(PlaceContiguousLayer(1, 8, 2));
  EXPECT_FALSE(Evaluate(p, trace, EvaluateOptions{}).ok());
  p.model = Shape();
  p.layers[0] = PlaceContiguousLayer(7, 4, 2);  // no shared layer
  EXPECT_FALSE(Evaluate(p, trace, EvaluateOptions{}).ok());
  p.layers[0] = PlaceContiguousLayer(1, 4, 2);
  p.model.top_k = 3;
  EXPECT_EQ(Evaluate(p, trace, EvaluateOptions{}).status().message(),
            "layer 1: placed for top-k 3 (model.top_k), the trace routes each token to 2 experts");
}

TEST(EvaluateTest, PlacementMustCoverEveryLayerOfTheTrace) {
  Trace trace(Shape(), {1, 2, 3, 5}, GateWeights::kAbsent);
  const uint16_t e[] = {0, 1, 0, 1, 0, 1, 0, 1};
  ASSERT_TRUE(trace.AddToken(0, 0, e, nullptr).ok());
  Placement p;
  p.topology = Topology{1, 2};
  p.model = Shape();
  for (int l : {1, 2, 3, 5, 6}) p.layers.push_back(PlaceContiguousLayer(l, 4, 2));
  EXPECT_TRUE(CheckPlacementFitsTrace(p, trace).ok());  // an extra placed layer is fine
  p.layers.erase(p.layers.begin() + 3);                 // layer 5
  EXPECT_EQ(CheckPlacementFitsTrace(p, trace).message(),
            "layer 5 of the trace is not in the placement (it places layers 1-3, 6)");
  EXPECT_TRUE(Evaluate(p, trace, EvaluateOptions{}).ok());  // Evaluate itself takes the shared ones
  p.model.num_experts = 8;
  EXPECT_EQ(CheckPlacementFitsTrace(p, trace).message(),
            "layer 1: placed for 8 routed experts (model.num_experts), the trace has 4");
}

TEST(CompareTest, ParsesVariants) {
  StatusOr<VariantSpec> v = ParseVariant("eplb+global+topo");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->place.strategy, Strategy::kEplb);
  EXPECT_EQ(v->place.eplb.mode, EplbMode::kGlobal);
  EXPECT_EQ(v->place.routing, RoutingPolicy::kTopology);
  v = ParseVariant("grace+norep");
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->place.grace.replication);
  EXPECT_TRUE(v->place.grace.rank_rebalance);
  v = ParseVariant("grace+norebal");
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->place.grace.replication);
  EXPECT_FALSE(v->place.grace.rank_rebalance);
  EXPECT_FALSE(ParseVariant("eplb+norebal").ok());
  EXPECT_FALSE(ParseVariant("grace+global").ok());
  EXPECT_FALSE(ParseVariant("contiguous+topo").ok());
  EXPECT_FALSE(ParseVariant("random").ok());
}

TEST(CompareTest, EplbGetsGracesCopiesLayerByLayer) {
  const ModelShape shape{.name = "s",
                         .num_experts = 32,
                         .top_k = 4,
                         .hidden_size = 64,
                         .moe_intermediate_size = 32,
                         .num_hidden_layers = 4,
                         .num_expert_groups = 1};
  const Trace trace = MakeSyntheticTrace(SyntheticTraceOptions{
      .shape = shape, .num_layers = 3, .num_tokens = 3000, .num_clusters = 4, .seed = 5});
  StatusOr<TraceSplit> split = SplitTrace(trace, 0.5);
  ASSERT_TRUE(split.ok());
  CompareOptions options;
  options.topology = Topology{2, 2};
  options.variants = {"contiguous", "eplb", "grace"};
  StatusOr<std::vector<CompareRow>> rows = Compare(split->profile, split->holdout, options);
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[0].label, "contiguous");
  EXPECT_EQ((*rows)[0].placement.NumExtraCopies(), 0);
  const Placement& eplb = (*rows)[1].placement;
  const Placement& grace = (*rows)[2].placement;
  EXPECT_GT(grace.NumExtraCopies(), 0);
  for (size_t l = 0; l < grace.layers.size(); ++l) {
    EXPECT_EQ(eplb.layers[l].NumExtraCopies(), grace.layers[l].NumExtraCopies());
  }
  // Planted clusters: grace keeps more token copies on their machine than contiguous.
  EXPECT_LT((*rows)[2].evaluation.total.traffic.machine_cross,
            (*rows)[0].evaluation.total.traffic.machine_cross);
}

}  // namespace
}  // namespace epserve::placement
