// Placement files feeding the plan: a hand-made placement with a known imbalance, written with
// the placement library's own writer and read back through LoadPlacementLayout, must make the
// GroupGEMM follow the busiest rank's load (not the mean), and split replicated experts the way
// the file's routing policy does.
#include "planner/placement_layout.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "placement/placement_io.h"
#include "planner/layer_model.h"
#include "planner/step_model.h"
#include "planner/test_util.h"

namespace epserve::planner {
namespace {

using testing::Efficiency;
using testing::Gpu;
using testing::Model;

// DeepSeek-V3's shape at EP16 on 2 machines of 8, one placed layer (model layer 3).
placement::Placement MakePlacement(std::vector<std::vector<int>> slots,
                                   placement::RoutingPolicy routing) {
  placement::Placement p;
  p.strategy = "contiguous";
  p.routing = routing;
  p.topology = {.num_nodes = 2, .ranks_per_node = 8};
  p.model = {.name = "deepseek-v3",
             .num_experts = 256,
             .top_k = 8,
             .hidden_size = 7168,
             .moe_intermediate_size = 2048,
             .num_hidden_layers = 61,
             .num_expert_groups = 8};
  p.layers.push_back(placement::LayerFromSlots(3, 256, std::move(slots)));
  return p;
}

std::vector<std::vector<int>> ContiguousSlots() {
  std::vector<std::vector<int>> slots(16);
  for (int e = 0; e < 256; ++e) slots[e / 16].push_back(e);
  return slots;
}

// Round trip through a file, as `plan layer --placement` reads it.
ExpertPlacement ThroughFile(const placement::Placement& p, const std::string& name) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("planner_placement_" + name + ".json")).string();
  Status saved = placement::SavePlacement(p, path);
  EXPECT_TRUE(saved.ok()) << saved.ToString();
  StatusOr<ExpertPlacement> layout = LoadPlacementLayout(path);
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  std::filesystem::remove(path);
  return *layout;
}

class PlacementPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    hw_ = Gpu("H800");
    model_ = Model("deepseek-v3");
    eff_ = Efficiency();
  }

  struct Planned {
    LayerBreakdown layer;
    MemoryFit memory;
  };
  // A decode MoE layer at 128 requests per GPU (4096 tokens in the layer: every expert gets
  // 4096 x 8 / 256 = 128 rows, so every expert of every rank is touched).
  Planned Plan(const ExpertPlacement& placement) {
    int most = 0;
    for (const ExpertLayout& l : placement.layers) most = std::max(most, l.MaxSlots());
    const int redundant = most * 16 - 256;  // every rank provisioned like the fullest
    StatusOr<Deployment> d = MakeDeployment(
        model_, {.ep = 16, .tp = 1, .gpus_per_machine = 8, .redundant_experts = redundant});
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    StatusOr<RoutingModel> routing = RoutingModel::Create(model_, {.ep = 16,
                                                                   .ranks_per_machine = 8,
                                                                   .redundant_experts = redundant,
                                                                   .placement = &placement});
    EXPECT_TRUE(routing.ok()) << routing.status().ToString();
    const PlanContext ctx{.hw = &hw_, .model = &model_, .eff = &eff_, .routing = &*routing};
    const Workload w{.batch = 128, .kv_len = 5000, .query_len = 2, .acceptance_rate = 0.6};
    StatusOr<LayerBreakdown> layer = ModelMoeLayer(ctx, *d, w, OverlapMode::kNone);
    EXPECT_TRUE(layer.ok()) << layer.status().ToString();
    return {.layer = *layer, .memory = EstimateMemory(ctx, *d, w)};
  }

  double GroupGemmWork(const LayerBreakdown& l) const {  // minus the fixed launch overheads
    return l.KernelUs("group_gemm_gate_up") + l.KernelUs("group_gemm_down") -
           2 * eff_.group_gemm.overhead_us;
  }

  HardwareSpec hw_;
  ModelSpec model_;
  EfficiencyFactors eff_;
};

TEST_F(PlacementPlanTest, GroupGemmScalesWithTheMaxRankLoad) {
  const ExpertPlacement even =
      ThroughFile(MakePlacement(ContiguousSlots(), placement::RoutingPolicy::kWeighted), "even");
  // Rank 0 takes rank 1's first 8 experts: 24 experts there, 8 on rank 1, 16 elsewhere. The
  // mean load is unchanged; the busiest rank has 1.5x of it.
  std::vector<std::vector<int>> slots = ContiguousSlots();
  slots[0].insert(slots[0].end(), slots[1].begin(), slots[1].begin() + 8);
  slots[1].erase(slots[1].begin(), slots[1].begin() + 8);
  const ExpertPlacement skewed =
      ThroughFile(MakePlacement(slots, placement::RoutingPolicy::kWeighted), "skewed");
  ASSERT_EQ(skewed.layers.size(), 1u);
  EXPECT_EQ(skewed.layers[0].layer_id, 3);
  EXPECT_EQ(skewed.layers[0].MaxSlots(), 24);

  const Planned a = Plan(even);
  const Planned b = Plan(skewed);
  std::printf(
      "GroupGEMM (less overheads): even %.1f us, skewed %.1f us (x%.3f); rows max/mean "
      "%.3f vs %.3f\n",
      GroupGemmWork(a.layer), GroupGemmWork(b.layer),
      GroupGemmWork(b.layer) / GroupGemmWork(a.layer), b.layer.rank_rows_max_over_mean,
      a.layer.rank_rows_max_over_mean);
  EXPECT_NEAR(a.layer.rank_rows_max_over_mean, 1.0, 1e-12);
  EXPECT_NEAR(b.layer.rank_rows_max_over_mean, 1.5, 1e-12);
  EXPECT_NEAR(a.layer.touched_experts, 16, 1e-9);
  EXPECT_NEAR(b.layer.touched_experts, 24, 1e-9);
  EXPECT_NEAR(b.layer.tokens_per_expert, a.layer.tokens_per_expert, 1e-9);  // 128 rows each
  // Both the FLOPs and the bytes of g x [m,k]x[k,n] scale with g: the time scales by 24 / 16.
  EXPECT_NEAR(GroupGemmWork(b.layer) / GroupGemmWork(a.layer), 1.5, 1e-9);
  EXPECT_NEAR((b.layer.KernelUs("expert_act") - eff_.elementwise.overhead_us) /
                  (a.layer.KernelUs("expert_act") - eff_.elementwise.overhead_us),
              1.5, 1e-9);
  // Memory: every rank is provisioned for 24 slots, 8 more experts in each of the 58 MoE layers
  // and the MTP layer (3 FP8 matrices of 2048 x 7168 plus 16 x 56 fp32 scales each).
  const double matrix = 2048.0 * 7168 + 16 * 56 * 4;
  EXPECT_NEAR(b.memory.weight_bytes - a.memory.weight_bytes, 8 * 59 * 3 * matrix, 1.0);
}

TEST_F(PlacementPlanTest, ReplicasSplitRowsAsTheRoutingPolicyDoes) {
  // Expert 0 (rank 0, machine 0) gets a replica on rank 9 (machine 1); weights 3 : 1.
  std::vector<std::vector<int>> slots = ContiguousSlots();
  slots[9].push_back(0);
  for (placement::RoutingPolicy policy :
       {placement::RoutingPolicy::kWeighted, placement::RoutingPolicy::kTopology}) {
    placement::Placement p = MakePlacement(slots, policy);
    p.layers[0].copies[0] = {{.rank = 0, .weight = 3}, {.rank = 9, .weight = 1}};
    const ExpertPlacement layout =
        ThroughFile(p, std::string(placement::RoutingPolicyName(policy)));
    StatusOr<RoutingModel> routing = RoutingModel::Create(
        model_, {.ep = 16, .ranks_per_machine = 8, .redundant_experts = 16, .placement = &layout});
    ASSERT_TRUE(routing.ok()) << routing.status().ToString();
    const LayerRouting r = routing->Evaluate(0, 4096, 256);
    ASSERT_EQ(r.ranks.size(), 16u);
    // wrr: rank 0 serves 3/4 of expert 0, rank 9 1/4. topo: every token from machine 0 finds
    // expert 0 on its own machine (rank 0), every token from machine 1 on rank 9: 1/2 each.
    const double share0 = policy == placement::RoutingPolicy::kWeighted ? 0.75 : 0.5;
    const double per_expert = 4096.0 * 8 / 256;  // 128 rows
    EXPECT_NEAR(r.ranks[0].rows, per_expert * (15 + share0), 1e-9);
    EXPECT_NEAR(r.ranks[9].rows, per_expert * (16 + (1 - share0)), 1e-9);
    EXPECT_NEAR(r.ranks[5].rows, per_expert * 16, 1e-9);
    EXPECT_NEAR(r.mean_rows, per_expert * 16, 1e-9);
  }
}

TEST_F(PlacementPlanTest, MismatchedPlacementsAreClearErrors) {
  std::vector<std::vector<int>> slots = ContiguousSlots();
  slots[0].insert(slots[0].end(), slots[1].begin(), slots[1].begin() + 8);
  slots[1].erase(slots[1].begin(), slots[1].begin() + 8);
  const ExpertPlacement skewed =
      ThroughFile(MakePlacement(slots, placement::RoutingPolicy::kWeighted), "errors");
  // Too few slots provisioned for its fullest rank.
  StatusOr<RoutingModel> small =
      RoutingModel::Create(model_, {.ep = 16, .ranks_per_machine = 8, .placement = &skewed});
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("a rank holds 24 expert slots but EP 16 with "
                                          "--redundant-experts 0 gives 16 per rank"),
            std::string::npos)
      << small.status().message();
  // Another EP.
  StatusOr<RoutingModel> other = RoutingModel::Create(
      model_, {.ep = 32, .ranks_per_machine = 8, .redundant_experts = 512, .placement = &skewed});
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("places experts on 16 ranks but EP is 32"),
            std::string::npos)
      << other.status().message();
  // A trace layer the placement does not place.
  RoutingTrace trace{
      .layer_ids = {4}, .selections = {{0, 1, 2, 3, 4, 5, 6, 7}}, .top_k = 8, .num_experts = 8};
  StatusOr<RoutingModel> traced = RoutingModel::Create(model_, {.ep = 16,
                                                                .ranks_per_machine = 8,
                                                                .redundant_experts = 128,
                                                                .trace = &trace,
                                                                .placement = &skewed});
  ASSERT_FALSE(traced.ok());
  EXPECT_NE(traced.status().message().find("layer 4 of the routing trace is not in"),
            std::string::npos)
      << traced.status().message();
}

}  // namespace
}  // namespace epserve::planner
