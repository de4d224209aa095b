// Which routed experts each EP rank holds in one MoE layer, and what share of an expert's tokens
// each of its copies serves. Three sources (docs/planner.md, "Redundant experts"):
//   - contiguous: rank r holds experts [r*g, (r+1)*g), one copy each (the default);
//   - balanced: R redundant copies placed the way EPLB places them (BalancedLayout);
//   - a placement file (`epserve place`, docs/placement-format.md), converted by
//     planner/placement_layout.h so that this library does not depend on src/placement.
// Thread safety: plain values.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace epserve::planner {

// One weight copy of a routed expert on one rank.
struct ExpertSlot {
  int expert = 0;
  double share = 1.0;  // fraction of the expert's tokens this copy serves; sums to 1 per expert
};

// The slots of every rank in one MoE layer.
struct ExpertLayout {
  int layer_id = -1;  // the model's layer number (placement files); -1 when not tied to a layer
  std::vector<std::vector<ExpertSlot>> ranks;  // ranks[r]: rank r's slots

  int num_ranks() const { return static_cast<int>(ranks.size()); }
  int MaxSlots() const;    // slots of the fullest rank (its weight memory)
  int TotalSlots() const;  // over all ranks
  // Every expert in [0, num_experts) has a copy, shares are positive and sum to 1 per expert
  // (within 1e-6). `what` names the layout in the message.
  Status Validate(int num_experts, const std::string& what) const;
};

// An explicit layout for each placed layer (from a placement file), with where it came from.
struct ExpertPlacement {
  std::string source;  // file name, for messages
  int num_ranks = 0;
  int ranks_per_machine = 0;  // the layout the copies' shares were worked out for; 0: any
  int num_experts = 0;
  std::vector<ExpertLayout> layers;  // ascending layer_id
};

// Rank r holds experts [r*g, (r+1)*g), g = num_experts / ep. REQUIRES: ep divides num_experts.
ExpertLayout ContiguousLayout(int num_experts, int ep);

// EPLB's greedy scheme without its group hierarchy: `redundant` extra copies go one at a time to
// the expert with the highest load per copy (ties: lower id), each copy serving an equal share;
// then copies, heaviest first (ties: lower expert id), go to the least-loaded rank (ties: lower
// rank) with a free slot that does not hold that expert yet (if every rank with a free slot holds
// it, to the least-loaded of those). Every rank ends with (experts + redundant) / ep slots.
// `expert_load`: relative load per expert (selection probabilities or counts), all >= 0.
// InvalidArgument when the slots do not split evenly over the ranks.
StatusOr<ExpertLayout> BalancedLayout(const std::vector<double>& expert_load, int ep,
                                      int redundant);

// Load each rank receives when expert e receives expert_load[e] and its copies split it by share.
std::vector<double> LayoutRankLoads(const ExpertLayout& layout,
                                    const std::vector<double>& expert_load);

}  // namespace epserve::planner
