// What a copy budget buys: the placement `epserve place` writes (the "grace" row) against
// contiguous and EPLB placed under the same budget, evaluated on held-out traffic, for one
// budget or a list of them (the frontier of docs/placement-results.md). The engine of
// `place evaluate --frontier` and of the real-trace checks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "placement/compare.h"

namespace epserve::placement {

// The variants a frontier compares: contiguous, every EPLB mode (with its own routing and with
// topology-aware routing) and the default placement.
std::vector<std::string> FrontierVariants();

// One budget's outcome.
struct BudgetOutcome {
  int redundant_slots = 0;      // extra slots per layer each strategy was given
  int grace_extra_copies = 0;   // the grace row's copies summed over layers (may be fewer)
  int64_t grace_cross = 0;      // (token, machine) copies sent across machines
  int64_t best_eplb_cross = 0;  // the fewest of any eplb row
  std::string best_eplb;        // that row
  double reduction = 0;         // 1 - grace_cross / best_eplb_cross
  double grace_time_us = 0;     // modeled MoE-layer time
  double fastest_rival_time_us = 0;
  std::string fastest_rival;       // the fastest contiguous or eplb row
  double grace_max_over_mean = 0;  // rank load over the evaluation part
};

// Summarizes the rows of one Compare. InvalidArgument unless they hold a "grace" row and at
// least one eplb row.
StatusOr<BudgetOutcome> SummarizeBudget(const std::vector<CompareRow>& rows, int redundant_slots);

struct FrontierOptions {
  CompareOptions compare;    // topology, variants, cost model; `redundant` is set per budget
  std::vector<int> budgets;  // extra slots per layer, one Compare each
  // Called with "R=<budget>: <stage>", done and total (Compare's progress).
  std::function<void(const std::string& stage, int done, int total)> progress;
};

// Runs Compare once per budget (profile and holdout as for Compare) and summarizes each.
StatusOr<std::vector<BudgetOutcome>> RunFrontier(const Trace& profile, const Trace& holdout,
                                                 const FrontierOptions& options);

// One row per budget: R (and its share of `num_experts`), the grace row's copies,
// cross-machine copies against the best eplb row and the reduction, max/mean, modeled time
// against the fastest rival.
std::string FormatFrontierTable(const std::vector<BudgetOutcome>& outcomes, int num_experts);
std::string FrontierJson(const std::vector<BudgetOutcome>& outcomes, const Topology& topology,
                         int num_experts);

}  // namespace epserve::placement
