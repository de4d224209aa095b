#include "placement/budget.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "placement/compare.h"
#include "placement/frontier.h"
#include "placement/synthetic.h"

namespace epserve::placement {
namespace {

ModelShape V2Lite() { return DeepSeekV2LiteShape(); }

TEST(PlacementBudgetTest, ExpertBytesAreThreeMatrices) {
  // V2-Lite: 3 x 2048 x 1408 BF16 elements, 17.3 MB.
  EXPECT_DOUBLE_EQ(ExpertBytes(V2Lite(), 2), 3.0 * 2048 * 1408 * 2);
}

TEST(PlacementBudgetTest, ResolvesSlotsGigabytesAndTheDefault) {
  EXPECT_EQ(*ResolveRedundantSlots(BudgetRequest{}, V2Lite(), 26), 32);
  EXPECT_EQ(*ResolveRedundantSlots(BudgetRequest{.redundant_slots = 0}, V2Lite(), 26), 0);
  EXPECT_EQ(*ResolveRedundantSlots(BudgetRequest{.redundant_slots = 8}, V2Lite(), 26), 8);
  // 8 slots x 26 layers x 17.3 MB = 3.60 GB; a little less buys 7.
  const double eight = 8 * 26 * ExpertBytes(V2Lite(), 2) / 1e9;
  EXPECT_EQ(*ResolveRedundantSlots(BudgetRequest{.copy_budget_gb = eight + 1e-6}, V2Lite(), 26), 8);
  EXPECT_EQ(*ResolveRedundantSlots(BudgetRequest{.copy_budget_gb = eight - 1e-3}, V2Lite(), 26), 7);
  // FP8 weights: twice the slots for the same bytes.
  EXPECT_EQ(*ResolveRedundantSlots(BudgetRequest{.copy_budget_gb = eight + 1e-6, .weight_bytes = 1},
                                   V2Lite(), 26),
            16);
  // Less than one expert's weights per layer: no copies.
  EXPECT_EQ(*ResolveRedundantSlots(BudgetRequest{.copy_budget_gb = 0.1}, V2Lite(), 26), 0);
}

TEST(PlacementBudgetTest, RefusesConflictingOrOversizedBudgetsNamingTheFlag) {
  Status both =
      ResolveRedundantSlots(BudgetRequest{.redundant_slots = 8, .copy_budget_gb = 1}, V2Lite(), 26)
          .status();
  EXPECT_EQ(both.message(),
            "--redundant-slots and --copy-budget-gb both set the copy budget; give one");
  EXPECT_EQ(ResolveRedundantSlots(BudgetRequest{.redundant_slots = 2000}, V2Lite(), 26)
                .status()
                .message(),
            "--redundant-slots 2000: 2000 extra slots per layer, more than 1024 (16 per routed "
            "expert)");
  EXPECT_EQ(
      ResolveRedundantSlots(BudgetRequest{.copy_budget_gb = 1e6}, V2Lite(), 26).status().message(),
      "--copy-budget-gb 1e+06: 2223017 extra slots per layer, more than 1024 (16 per routed "
      "expert)");
  EXPECT_EQ(
      ResolveRedundantSlots(BudgetRequest{.copy_budget_gb = NAN}, V2Lite(), 26).status().message(),
      "--copy-budget-gb nan: must be a finite number > 0");
  EXPECT_FALSE(ResolveRedundantSlots(BudgetRequest{.copy_budget_gb = -1}, V2Lite(), 26).ok());
}

TEST(PlacementBudgetTest, ParsesBudgetListsOfSlotsAndShares) {
  StatusOr<std::vector<int>> list =
      ParseBudgetList("0,3.125%,6.25%,12.5%,25%,50%", 64, "--frontier");
  ASSERT_TRUE(list.ok()) << list.status().message();
  EXPECT_EQ(*list, (std::vector<int>{0, 2, 4, 8, 16, 32}));
  // Shares round down: 12.5% of 60 experts is 7.5 slots, 7 of them.
  EXPECT_EQ(*ParseBudgetList("12.5%,50%,9", 60, "--frontier"), (std::vector<int>{7, 30, 9}));
  EXPECT_EQ(ParseBudgetList("8,x", 64, "--frontier").status().message(),
            "--frontier 8,x: entry \"x\" is not a slot count (e.g. 8) or a share of the experts "
            "(e.g. 12.5%)");
  EXPECT_FALSE(ParseBudgetList("8,", 64, "--frontier").ok());
  EXPECT_FALSE(ParseBudgetList("2.5", 64, "--frontier").ok());
  EXPECT_FALSE(ParseBudgetList("-1", 64, "--frontier").ok());
  EXPECT_FALSE(ParseBudgetList("nan%", 64, "--frontier").ok());
  EXPECT_EQ(ParseBudgetList("2000%", 64, "--frontier").status().message(),
            "--frontier 2000%: entry \"2000%\" is more than 1024 extra slots per layer (16 per "
            "routed expert)");
}

Trace Synthetic() {
  const ModelShape shape{.name = "s",
                         .num_experts = 32,
                         .top_k = 4,
                         .hidden_size = 64,
                         .moe_intermediate_size = 32,
                         .num_hidden_layers = 4,
                         .num_expert_groups = 1};
  return MakeSyntheticTrace(SyntheticTraceOptions{
      .shape = shape, .num_layers = 2, .num_tokens = 3000, .num_clusters = 4, .seed = 7});
}

TEST(PlacementBudgetTest, EveryStrategyPlacesUnderTheSameBudget) {
  StatusOr<TraceSplit> split = SplitTrace(Synthetic(), 0.5);
  ASSERT_TRUE(split.ok());
  for (int budget : {0, 4}) {
    CompareOptions options;
    options.topology = Topology{2, 2};
    options.variants = {"contiguous", "eplb", "eplb+global+topo", "grace", "grace+asis"};
    options.redundant = budget;
    StatusOr<std::vector<CompareRow>> rows = Compare(split->profile, split->holdout, options);
    ASSERT_TRUE(rows.ok()) << rows.status().message();
    for (const CompareRow& row : *rows) {
      for (const LayerPlacement& layer : row.placement.layers) {
        if (row.label.rfind("eplb", 0) == 0) {
          EXPECT_EQ(layer.NumExtraCopies(), budget) << row.label;  // eplb gets all of them
        } else {
          EXPECT_LE(layer.NumExtraCopies(), budget) << row.label;  // grace at most
        }
      }
    }
    if (budget > 0) {
      EXPECT_EQ((*rows)[4].placement.layers[0].NumExtraCopies(), budget);
    }
  }
}

TEST(PlacementFrontierTest, SummarizesAgainstTheBestEplbRowAndTheFastestRival) {
  auto row = [](std::string label, int64_t cross, double time, double max) {
    CompareRow r;
    r.label = std::move(label);
    r.evaluation.total.traffic.machine_cross = cross;
    r.evaluation.total.time_us = time;
    r.evaluation.total.load.max = max;
    r.evaluation.total.load.mean = 1;
    r.evaluation.total.extra_copies = 5;
    return r;
  };
  const std::vector<CompareRow> rows = {
      row("contiguous", 1000, 90, 1.3), row("eplb+global", 900, 95, 1.05),
      row("eplb+global+topo", 800, 97, 1.1), row("grace", 600, 91, 1.15)};
  StatusOr<BudgetOutcome> o = SummarizeBudget(rows, 8);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->redundant_slots, 8);
  EXPECT_EQ(o->best_eplb, "eplb+global+topo");
  EXPECT_EQ(o->best_eplb_cross, 800);
  EXPECT_DOUBLE_EQ(o->reduction, 0.25);
  EXPECT_EQ(o->fastest_rival, "contiguous");  // grace's 91 is not below contiguous's 90
  EXPECT_DOUBLE_EQ(o->fastest_rival_time_us, 90);
  EXPECT_DOUBLE_EQ(o->grace_max_over_mean, 1.15);
  EXPECT_FALSE(SummarizeBudget({rows[0], rows[3]}, 8).ok());  // no eplb row
}

TEST(PlacementFrontierTest, RunsOneComparisonPerBudget) {
  StatusOr<TraceSplit> split = SplitTrace(Synthetic(), 0.5);
  ASSERT_TRUE(split.ok());
  FrontierOptions options;
  options.compare.topology = Topology{2, 2};
  options.compare.variants = FrontierVariants();
  options.budgets = {0, 8};
  StatusOr<std::vector<BudgetOutcome>> out = RunFrontier(split->profile, split->holdout, options);
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].grace_extra_copies, 0);
  EXPECT_LE((*out)[1].grace_extra_copies, 8 * 2);
  // Planted clusters: grace sends fewer copies across machines than any eplb row.
  EXPECT_GT((*out)[0].reduction, 0);
  EXPECT_GT((*out)[1].reduction, 0);
  const std::string table = FormatFrontierTable(*out, 32);
  EXPECT_NE(table.find("25.0%"), std::string::npos) << table;  // 8 of 32
}

}  // namespace
}  // namespace epserve::placement
