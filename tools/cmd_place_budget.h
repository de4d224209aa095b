// The copy budget flags of `epserve place` and `place evaluate` (--redundant-slots,
// --copy-budget-gb, the older --redundant) and `place evaluate --frontier`
// (src/placement/budget.h, frontier.h).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "base/status.h"
#include "placement/budget.h"
#include "placement/compare.h"
#include "placement/trace.h"

namespace epserve::tools {

struct BudgetFlags {
  int redundant_slots = -1;
  double copy_budget_gb = 0;
  int legacy_redundant = -1;  // --redundant K: K > 0 is --redundant-slots K, 0 the default
  bool no_replication = false;
};

// Adds --redundant-slots, --copy-budget-gb and --redundant to `cmd`.
void AddBudgetOptions(CLI::App* cmd, BudgetFlags* flags);

// Whether any of the budget flags was given.
bool BudgetGiven(const BudgetFlags& flags);

// Extra slots per layer for `trace` (--no-replication: 0). Errors name the flag and value.
StatusOr<int> ResolveBudget(const BudgetFlags& flags, const placement::Trace& trace,
                            int weight_bytes);

// "8 extra slots per layer (12.5% of 64 experts; 208 over 26 layers, 3.60 GB of BF16 weights)".
std::string DescribeBudget(int slots, const placement::Trace& trace, int weight_bytes);

// `place evaluate --frontier LIST`: `options`' variants compared under each budget of `list`
// (placement/frontier.h), as the table or, with `json`, the JSON object to print. Errors name
// the flag and entry.
StatusOr<std::string> FrontierReport(
    const std::string& list, const placement::TraceSplit& parts,
    const placement::CompareOptions& options, bool json,
    const std::function<void(const std::string& stage, int done, int total)>& progress);

}  // namespace epserve::tools
