#include "planner/routing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "planner/test_util.h"

namespace epserve::planner {
namespace {

using testing::Model;

// Simulates group-limited uniform routing and counts how often each rank is hit.
double SimulatedRankHit(const ModelSpec& m, int ep, int rank, int tokens) {
  std::mt19937 rng(12345);
  const int group_size = m.n_routed_experts / m.n_group;
  const int g = m.n_routed_experts / ep;
  int hits = 0;
  std::vector<int> groups(m.n_group);
  for (int t = 0; t < tokens; ++t) {
    std::iota(groups.begin(), groups.end(), 0);
    std::shuffle(groups.begin(), groups.end(), rng);
    std::vector<int> pool;
    for (int i = 0; i < m.topk_group; ++i) {
      for (int e = 0; e < group_size; ++e) pool.push_back(groups[i] * group_size + e);
    }
    std::shuffle(pool.begin(), pool.end(), rng);
    bool hit = false;
    for (int j = 0; j < m.num_experts_per_tok; ++j) hit = hit || pool[j] / g == rank;
    hits += hit;
  }
  return static_cast<double>(hits) / tokens;
}

TEST(RoutingTest, GroupLimitedRankHitMatchesSimulation) {
  ModelSpec v3 = Model("deepseek-v3");
  for (int ep : {4, 8, 16, 128}) {
    const double exact = UniformRankHitProbability(v3, v3.n_routed_experts / ep, 0);
    const double simulated = SimulatedRankHit(v3, ep, 0, 40000);
    EXPECT_NEAR(exact, simulated, 0.01) << "EP" << ep;
  }
  ModelSpec lite = Model("deepseek-v2-lite");  // one group: plain uniform top-6 of 64
  const double exact = UniformRankHitProbability(lite, 8, 3);
  EXPECT_NEAR(exact, 1 - (56.0 * 55 * 54 * 53 * 52 * 51) / (64.0 * 63 * 62 * 61 * 60 * 59), 1e-12);
}

TEST(RoutingTest, UniformDestinationsAndTouchedExperts) {
  ModelSpec v3 = Model("deepseek-v3");
  // EP8: each rank holds one whole group of 32 and a token keeps 4 groups, so <= 4 ranks.
  StatusOr<RoutingModel> ep8 = RoutingModel::Uniform(v3, 8, 8);
  ASSERT_TRUE(ep8.ok());
  LayerRouting r8 = ep8->Evaluate(0, /*total_tokens=*/2, /*tokens_per_rank=*/0.25);
  EXPECT_GT(r8.destinations_per_token, 3.5);
  EXPECT_LE(r8.destinations_per_token, 4.0);
  // Batch 1 with query length 2: 2 tokens x 8 experts touch ~16 experts, ~2 per rank.
  EXPECT_NEAR(r8.ranks[0].touched_experts * 8, 256 * (1 - std::pow(1 - 8.0 / 256, 2)), 1e-9);
  EXPECT_NEAR(r8.ranks[0].touched_experts, 1.97, 0.01);
  // Large batch: every local expert is touched, rows = tokens x top-k / EP.
  LayerRouting big = ep8->Evaluate(0, 2048, 256);
  EXPECT_NEAR(big.ranks[0].touched_experts, 32, 1e-6);
  EXPECT_NEAR(big.ranks[0].rows, 2048.0 * 8 / 8, 1e-9);
  // EP128 over 16 machines: ~7.8 distinct ranks per token, almost all across InfiniBand.
  StatusOr<RoutingModel> ep128 = RoutingModel::Uniform(v3, 128, 8);
  LayerRouting r128 = ep128->Evaluate(0, 128 * 256, 256);
  EXPECT_NEAR(r128.destinations_per_token, 7.78, 0.01);
  EXPECT_NEAR(r128.infiniband_rows, 256 * 7.78 * 120 / 128, 1);
  EXPECT_NEAR(r128.nvlink_rows, 256 * 7.78 * 7 / 128, 1);
  EXPECT_FALSE(RoutingModel::Uniform(v3, 96, 8).ok());  // 96 does not divide 256
}

constexpr char kTrace[] =
    "Layer ID,Batch Number,Token,Activated Expert IDs\n"
    "1,0,\xc4\xa0I,\"[0, 1]\"\n"
    "1,0,\",\",\"[0, 2]\"\n"
    "1,0,\"say \"\"hi\"\"\",\"[1, 0]\"\n"
    "1,0,x,\"[0, 3]\"\n"
    "2,0,\xc4\xa0I,\"[2, 3]\"\n"
    "2,0,\",\",\"[1, 3]\"\n"
    "2,0,y,\"[0, 2]\"\n"
    "2,0,x,\"[1, 2]\"\n";

ModelSpec TinyModel() {
  ModelSpec m;
  m.name = "tiny";
  m.hidden_size = 64;
  m.num_hidden_layers = 3;
  m.first_k_dense_replace = 1;
  m.intermediate_size = 128;
  m.n_routed_experts = 4;
  m.num_experts_per_tok = 2;
  m.moe_intermediate_size = 32;
  m.num_attention_heads = 4;
  m.kv_lora_rank = 16;
  m.qk_nope_head_dim = 8;
  m.qk_rope_head_dim = 8;
  m.v_head_dim = 8;
  m.vocab_size = 100;
  return m;
}

TEST(RoutingTest, TraceGivesPerLayerSkew) {
  StatusOr<RoutingTrace> trace = ParseRoutingTraceCsv(kTrace, "inline");
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_EQ(trace->layer_ids, (std::vector<int>{1, 2}));
  EXPECT_EQ(trace->top_k, 2);
  EXPECT_EQ(trace->num_experts, 4);
  EXPECT_EQ(trace->NumTokens(0), 4);
  ModelSpec tiny = TinyModel();
  ASSERT_TRUE(tiny.Validate().ok());
  StatusOr<RoutingModel> routing = RoutingModel::FromTrace(*trace, tiny, /*ep=*/2, 2);
  ASSERT_TRUE(routing.ok()) << routing.status().ToString();
  EXPECT_EQ(routing->num_layers(), 2);
  // Layer 1: expert 0 in every token, so rank 0 (experts 0-1) gets 4 of 4 tokens with 6 rows.
  LayerRouting l1 = routing->Evaluate(0, 4, 2);
  ASSERT_EQ(l1.ranks.size(), 2u);
  EXPECT_NEAR(l1.ranks[0].rows, 6, 1e-9);
  EXPECT_NEAR(l1.ranks[1].rows, 2, 1e-9);
  EXPECT_NEAR(l1.ranks[0].touched_experts, 2 - std::pow(0.5, 4), 1e-9);  // P(e1) = 2/4
  EXPECT_NEAR(l1.destinations_per_token, (4 + 2) / 4.0, 1e-9);
  // The busiest receiver (rank 0 sees every token) sets the NVLink volume.
  EXPECT_NEAR(l1.nvlink_rows, 4 * 1.0 * 1 / 2, 1e-9);
  // A model with other expert counts cannot use this trace.
  EXPECT_FALSE(RoutingModel::FromTrace(*trace, Model("deepseek-v3"), 8, 8).ok());
}

TEST(RoutingTest, TraceFilesAndDirectories) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("planner_trace_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "a.csv") << kTrace;
  std::ofstream(dir / "b.csv") << kTrace;
  StatusOr<RoutingTrace> both = LoadRoutingTrace(dir.string());
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  EXPECT_EQ(both->NumTokens(0), 8);
  StatusOr<RoutingTrace> one = LoadRoutingTrace((dir / "a.csv").string());
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->NumTokens(1), 4);
  std::filesystem::remove_all(dir);
  EXPECT_FALSE(
      ParseRoutingTraceCsv("Layer ID,Batch Number,Token,Activated Expert IDs\n1,0,a,\"[0\n", "bad")
          .ok());
  EXPECT_FALSE(ParseRoutingTraceCsv("h\n1,0,a,\"[0, 1]\"\n1,0,b,\"[0, 1, 2]\"\n", "k").ok());
  EXPECT_FALSE(ParseRoutingTraceCsv("header only\n", "empty").ok());
}

}  // namespace
}  // namespace epserve::planner
