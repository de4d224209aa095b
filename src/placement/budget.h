// The memory budget of expert placement: extra expert slots per MoE layer, beyond one slot per
// routed expert (`epserve place --redundant-slots R` or `--copy-budget-gb G`). Every strategy
// places under the same budget: grace makes at most R copies per layer (its per-layer selection
// may keep fewer, place.h), EPLB is given exactly R. Value functions; safe from any thread.
#pragma once

#include <string_view>
#include <vector>

#include "base/status.h"
#include "placement/trace.h"

namespace epserve::placement {

// The budget when none is given: half the routed experts per layer (32 of DeepSeek-V2-Lite's
// 64), 50% more expert memory. It is a memory default, not a property of the method: the method
// places under whatever budget it gets (docs/placement-results.md, the frontier tables).
inline int DefaultRedundantSlots(int num_experts) { return num_experts / 2; }

// The most slots per layer a budget may ask for (a typo must not allocate without end).
inline int MaxRedundantSlots(int num_experts) { return 16 * num_experts; }

// Bytes of one routed expert's weights: gate, up and down projections of
// hidden_size x moe_intermediate_size each.
double ExpertBytes(const ModelShape& shape, int weight_bytes);

// What the flags asked for. At most one of the two may be set.
struct BudgetRequest {
  int redundant_slots = -1;   // >= 0: this many extra slots per layer
  double copy_budget_gb = 0;  // > 0: the most slots per layer whose weights, summed over the
                              // placed MoE layers, fit in this many GB (10^9 bytes)
  int weight_bytes = 2;       // bytes per expert weight element (BF16)
};

// Extra slots per layer for a trace of `num_layers` MoE layers of `shape`: the request, or
// DefaultRedundantSlots when it asks for nothing. InvalidArgument, naming the flag and value,
// for both flags at once, a negative or non-finite value, or more than MaxRedundantSlots.
StatusOr<int> ResolveRedundantSlots(const BudgetRequest& request, const ModelShape& shape,
                                    int num_layers);

// A comma-separated list of budgets: "8" is 8 slots per layer, "12.5%" is floor(12.5% of
// `num_experts`) (R = 0, 2, 4, 8, 16, 32 for 64 experts is "0,3.125%,6.25%,12.5%,25%,50%").
// InvalidArgument naming `flag` and the entry for anything else or an entry above
// MaxRedundantSlots.
StatusOr<std::vector<int>> ParseBudgetList(std::string_view list, int num_experts,
                                           std::string_view flag);

}  // namespace epserve::placement
