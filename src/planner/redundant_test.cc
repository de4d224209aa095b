// Redundant expert slots: EPs that do not divide the experts, the memory of the extra copies,
// the EPLB-like balanced layout, and the busiest rank (not the mean) setting the GroupGEMM.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <set>
#include <tuple>

#include "planner/expert_layout.h"
#include "planner/routing.h"
#include "planner/step_model.h"
#include "planner/sweep.h"
#include "planner/test_util.h"

namespace epserve::planner {
namespace {

using testing::Efficiency;
using testing::Gpu;
using testing::Model;

Workload Decode(int batch) {
  return {.batch = batch, .kv_len = 5000, .query_len = 2, .acceptance_rate = 0.6};
}

StatusOr<StepEstimate> PlanDecode(const std::string& gpu, int ep, int redundant, int batch) {
  const HardwareSpec hw = Gpu(gpu);
  const ModelSpec model = Model("deepseek-v3");
  const EfficiencyFactors eff = Efficiency();
  ASSIGN_OR_RETURN(
      Deployment d,
      MakeDeployment(model,
                     {.ep = ep, .tp = 1, .gpus_per_machine = 8, .redundant_experts = redundant}));
  ASSIGN_OR_RETURN(RoutingModel routing,
                   RoutingModel::Create(
                       model, {.ep = ep, .ranks_per_machine = 8, .redundant_experts = redundant}));
  const PlanContext ctx{.hw = &hw, .model = &model, .eff = &eff, .routing = &routing};
  return EstimateStep(ctx, d, Decode(batch), {});
}

TEST(RedundantExpertsTest, Ep144On800AndEp72OnH100PlanWith32Redundant) {
  for (const auto& [gpu, ep, slots] :
       {std::tuple<std::string, int, int>{"H800", 144, 2}, {"H100", 72, 4}}) {
    StatusOr<StepEstimate> est = PlanDecode(gpu, ep, 32, 64);
    ASSERT_TRUE(est.ok()) << gpu << " EP" << ep << ": " << est.status().ToString();
    std::printf(
        "%s EP%d+32: %.1f tokens/s per request, %.0f per machine, MoE layer %.0f us, "
        "weights %.1f GB\n",
        gpu.c_str(), ep, est->speed, est->throughput_per_machine, est->moe_layer.total_us,
        est->memory.weight_bytes / 1e9);
    EXPECT_GT(est->speed, 0);
    // Uniform routing over EPLB-like copies: 256 experts + 32 copies in `slots` per rank. The
    // busiest rank keeps `slots` whole experts while the mean rank holds 256 / EP of them.
    EXPECT_NEAR(est->moe_layer.touched_experts, slots, 1e-6);
    EXPECT_NEAR(est->moe_layer.rank_rows_max_over_mean, slots / (256.0 / ep), 1e-9);
    // 18 and 9 machines of 8 GPUs.
    EXPECT_NEAR(est->throughput_per_machine, est->speed * 64 * ep / (ep / 8), 1e-6);
  }
  // Without the redundant slots both are refused, with the numbers in the message.
  StatusOr<StepEstimate> bare = PlanDecode("H800", 144, 0, 64);
  ASSERT_FALSE(bare.ok());
  EXPECT_NE(bare.status().message().find("EP 144 does not divide the 256 routed experts"),
            std::string::npos)
      << bare.status().message();
  StatusOr<StepEstimate> off = PlanDecode("H100", 72, 30, 64);
  ASSERT_FALSE(off.ok());
  EXPECT_NE(off.status().message().find("256 + 30 = 286 expert slots do not split evenly over 72"),
            std::string::npos)
      << off.status().message();
}

TEST(RedundantExpertsTest, MemoryCountsTheExtraCopies) {
  const HardwareSpec hw = Gpu("H100");
  const ModelSpec model = Model("deepseek-v3");
  const EfficiencyFactors eff = Efficiency();
  double weights[2];
  for (int i = 0; i < 2; ++i) {
    const int redundant = i == 0 ? 0 : 128;  // 2 or 3 slots per rank at EP128
    StatusOr<Deployment> d = MakeDeployment(
        model, {.ep = 128, .tp = 1, .gpus_per_machine = 8, .redundant_experts = redundant});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    StatusOr<RoutingModel> routing = RoutingModel::Create(
        model, {.ep = 128, .ranks_per_machine = 8, .redundant_experts = redundant});
    ASSERT_TRUE(routing.ok());
    const PlanContext ctx{.hw = &hw, .model = &model, .eff = &eff, .routing = &*routing};
    weights[i] = EstimateMemory(ctx, *d, Decode(1)).weight_bytes;
  }
  // One more expert per rank in each of the 58 MoE layers and the MTP layer: 3 FP8 matrices of
  // 2048 x 7168 bytes, each with one fp32 scale per 128 x 128 tile (16 x 56 of them).
  const double matrix = 2048.0 * 7168 + 16 * 56 * 4;
  EXPECT_NEAR(weights[1] - weights[0], (58 + 1) * 3 * matrix, 1.0);
}

TEST(RedundantExpertsTest, BalancedLayoutCopiesTheHeaviestExperts) {
  // 8 experts, one 4x as hot as the rest, 4 ranks, 4 extra slots: the hot one gets copies until
  // its load per copy is no longer the highest (3 copies bring it to 1.0, a tie), then the tie
  // goes to the lowest id.
  std::vector<double> load(8, 1.0);
  load[5] = 4.0;
  StatusOr<ExpertLayout> layout = BalancedLayout(load, 4, 4);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  ASSERT_TRUE(layout->Validate(8, "test").ok());
  EXPECT_EQ(layout->MaxSlots(), 3);
  EXPECT_EQ(layout->TotalSlots(), 12);
  int copies_of_hot = 0, copies_of_first = 0;
  for (const auto& rank : layout->ranks) {
    for (const ExpertSlot& s : rank) {
      copies_of_hot += s.expert == 5;
      copies_of_first += s.expert == 0;
    }
  }
  EXPECT_EQ(copies_of_hot, 4);
  EXPECT_EQ(copies_of_first, 2);
  // Ten copies of load 1 and two of 0.5 in 4 x 3 slots: some rank holds three whole ones, so 3
  // is the best maximum; the greedy packing reaches it with the halves on the other ranks.
  std::vector<double> ranks = LayoutRankLoads(*layout, load);
  std::sort(ranks.begin(), ranks.end());
  EXPECT_EQ(ranks, (std::vector<double>{2.5, 2.5, 3, 3}));
  EXPECT_FALSE(BalancedLayout(load, 3, 0).ok());  // 8 slots over 3 ranks
}

// Monte Carlo of group-limited uniform routing; a token selecting an expert goes to one of its
// copies with probability `share`.
double SimulatedHit(const ModelSpec& m, const std::vector<ExpertSlot>& slots, int tokens) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  const int group_size = m.n_routed_experts / m.n_group;
  std::vector<int> groups(m.n_group);
  int hits = 0;
  for (int t = 0; t < tokens; ++t) {
    std::iota(groups.begin(), groups.end(), 0);
    std::shuffle(groups.begin(), groups.end(), rng);
    std::vector<int> pool;
    for (int i = 0; i < m.topk_group; ++i) {
      for (int e = 0; e < group_size; ++e) pool.push_back(groups[i] * group_size + e);
    }
    std::shuffle(pool.begin(), pool.end(), rng);
    bool hit = false;
    for (int j = 0; j < m.num_experts_per_tok; ++j) {
      for (const ExpertSlot& s : slots) {
        if (s.expert == pool[j] && u(rng) < s.share) hit = true;
      }
    }
    hits += hit;
  }
  return static_cast<double>(hits) / tokens;
}

TEST(RedundantExpertsTest, SlotHitProbabilityMatchesSimulation) {
  const ModelSpec v3 = Model("deepseek-v3");
  // Contiguous slots reduce to the closed form of the contiguous layout.
  std::vector<ExpertSlot> contiguous;
  for (int e = 32; e < 64; ++e) contiguous.push_back({.expert = e, .share = 1});
  EXPECT_NEAR(UniformSlotsHitProbability(v3, contiguous), UniformRankHitProbability(v3, 32, 1),
              1e-12);
  // Mixed shares across two groups, as EPLB's copies leave them.
  const std::vector<ExpertSlot> mixed = {{.expert = 3, .share = 0.5},
                                         {.expert = 4, .share = 1},
                                         {.expert = 200, .share = 0.5},
                                         {.expert = 201, .share = 1}};
  const double exact = UniformSlotsHitProbability(v3, mixed);
  const double simulated = SimulatedHit(v3, mixed, 200000);
  std::printf("mixed-share rank: exact %.5f simulated %.5f\n", exact, simulated);
  EXPECT_NEAR(exact, simulated, 0.003);
  // One slot: P(select it) x share = 8/256 x 0.25.
  EXPECT_NEAR(UniformSlotsHitProbability(v3, {{.expert = 9, .share = 0.25}}), 8.0 / 256 * 0.25,
              1e-12);
}

TEST(RedundantExpertsTest, CopiesOfAHotExpertRelieveTheBusiestRank) {
  // A trace where expert 0 is in every token: at EP16 its rank is the busiest by far. With 16
  // redundant slots EPLB copies it (and the next hottest) and the busiest rank's rows fall.
  const ModelSpec v3 = Model("deepseek-v3");
  RoutingTrace trace;
  trace.top_k = 8;
  trace.num_experts = 256;
  trace.layer_ids = {3};
  trace.selections.resize(1);
  std::mt19937 rng(3);
  for (int t = 0; t < 4000; ++t) {
    std::vector<int> ids(255);
    std::iota(ids.begin(), ids.end(), 1);
    std::shuffle(ids.begin(), ids.end(), rng);
    trace.selections[0].push_back(0);
    for (int j = 0; j < 7; ++j) trace.selections[0].push_back(static_cast<uint16_t>(ids[j]));
  }
  // Rank 0 holds experts 0-15 contiguously: its rows are those picks, scaled to 4096 tokens.
  const double rank0_picks = static_cast<double>(std::count_if(
      trace.selections[0].begin(), trace.selections[0].end(), [](uint16_t e) { return e < 16; }));
  double busiest[2];
  for (int i = 0; i < 2; ++i) {
    StatusOr<RoutingModel> routing = RoutingModel::Create(
        v3, {.ep = 16, .ranks_per_machine = 8, .redundant_experts = 16 * i, .trace = &trace});
    ASSERT_TRUE(routing.ok()) << routing.status().ToString();
    const LayerRouting r = routing->Evaluate(0, 4096, 256);
    busiest[i] = 0;
    for (const RankRouting& rank : r.ranks) busiest[i] = std::max(busiest[i], rank.rows);
    std::printf("redundant %d: busiest rank %.0f rows, mean %.0f\n", 16 * i, busiest[i],
                r.mean_rows);
    EXPECT_NEAR(r.mean_rows, 4096.0 * 8 / 16, 1e-6);  // copies move rows, never add them
  }
  // Without copies the hot expert's rank carries ~ 4096 x (1 + 15 x 7/255) ~ 5783 rows (2.8x
  // the mean of 2048); EPLB gives the hot expert all 16 extra slots (17 copies of ~241 rows).
  EXPECT_NEAR(busiest[0], rank0_picks / 4000 * 4096, 1e-6);
  EXPECT_GT(busiest[0], 2.7 * 2048);
  EXPECT_LT(busiest[1], 0.75 * busiest[0]);
}

TEST(RedundantExpertsTest, SweepAcceptsEpListsWhereTheSlotsSplitEvenly) {
  const HardwareSpec h800 = Gpu("H800");
  const ModelSpec model = Model("deepseek-v3");
  const EfficiencyFactors eff = Efficiency();
  SweepOptions options;
  options.ep_values = {8, 16, 32, 64, 72, 128, 144, 256};
  options.redundant_values = {0, 32};
  options.tp_values = {1};
  options.batches = {8};
  options.workload = Decode(8);
  StatusOr<SweepResult> result = RunSweep({.hw = &h800, .model = &model, .eff = &eff}, options);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  std::set<std::pair<int, int>> swept;
  for (const SweepPoint& p : result->points) {
    swept.insert({p.deployment.ep, p.deployment.redundant_experts});
  }
  for (const auto& [ep, r] : std::vector<std::pair<int, int>>{{16, 0},
                                                              {32, 0},
                                                              {64, 0},
                                                              {128, 0},
                                                              {256, 0},
                                                              {16, 32},
                                                              {32, 32},
                                                              {72, 32},
                                                              {144, 32}}) {
    EXPECT_TRUE(swept.count({ep, r})) << "EP" << ep << "+" << r;
  }
  EXPECT_FALSE(swept.count({72, 0}));
  EXPECT_FALSE(swept.count({128, 32}));
  bool said = false;
  for (const std::string& why : result->skipped) {
    said = said || why.find("EP 128 with --redundant-experts 32: 256 + 32 = 288 expert slots") !=
                       std::string::npos;
  }
  EXPECT_TRUE(said);
  // A list none of whose EPs fits is an error.
  options.ep_values = {96};
  options.redundant_values = {0};
  EXPECT_FALSE(RunSweep({.hw = &h800, .model = &model, .eff = &eff}, options).ok());
}

}  // namespace
}  // namespace epserve::planner
