// Places every MoE layer of a profiling trace with one strategy.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "placement/eplb.h"
#include "placement/evaluate.h"
#include "placement/grace.h"
#include "placement/placement.h"
#include "placement/trace.h"

namespace epserve::placement {

enum class Strategy { kContiguous, kEplb, kGrace };
std::string_view StrategyName(Strategy strategy);
StatusOr<Strategy> ParseStrategy(std::string_view name);

// Whether grace writes what it placed or, layer by layer, the candidate the profile says is
// fastest (modeled layer time, evaluate.h): grace as placed, the min-cut grouping's machines
// with none and half of its copies, EPLB with grace's copies and routing, and contiguous. So no
// layer is ever slower on the profile than contiguous. (The spectral grouping is not a candidate:
// on the V2-Lite traces it won 1 of 78 layers, and it doubles the time to place 256 experts.)
enum class Selection { kAsPlaced, kBestOnProfile };

// What the selection saw: the candidates' modeled times per layer on the profile.
struct ChoiceReport {
  std::vector<std::string> candidates;       // candidates[0] is the placement grace made
  std::vector<std::vector<double>> time_us;  // [candidate][layer], microseconds
  std::vector<int> chosen;                   // per layer, an index into candidates
};

// Called after each layer with (layers done, total); from the calling thread only.
using ProgressFn = std::function<void(int done, int total)>;

struct PlaceOptions {
  Topology topology;
  Strategy strategy = Strategy::kGrace;
  // Unset: topo for grace, wrr (equal shares, EPLB's own assumption) for the others.
  std::optional<RoutingPolicy> routing;
  // EPLB: extra copies per layer (eplb.num_redundant is ignored); `redundant_per_layer`, when
  // not empty, gives one count per trace layer instead (to match another strategy's copies
  // layer by layer).
  int redundant = 0;
  std::vector<int> redundant_per_layer;
  EplbOptions eplb;
  GraceOptions grace;
  int num_threads = 1;  // layers are placed in parallel; the result does not depend on it
  ProgressFn progress;
  // grace only; the cost model and step size the selection evaluates with.
  Selection selection = Selection::kBestOnProfile;
  CostModel cost;
  int step_tokens_per_rank = 1024;
  // Deals of the profile's prompts to the ranks the selection averages each candidate's modeled
  // time over (the first in trace order, the others shuffled; EvaluateOptions::deal_seed).
  int selection_deals = 4;

  // One copy budget for every strategy: `slots` extra copies per layer for EPLB and as GRACE's
  // bound; none (0) turns GRACE's replication off (its max_extra_copies 0 means "its default").
  void SetCopyBudget(int slots);
  Status Validate(const Trace& trace) const;
};

struct PlaceResult {
  Placement placement;
  std::vector<GraceLayerReport> grace_reports;   // one per layer for grace, else empty
  std::vector<std::vector<double>> expert_load;  // [layer][expert] profiled loads
  ChoiceReport choice;                           // grace with Selection::kBestOnProfile
  // grace with GraceOptions::copy_variants: [variant][layer], the same machines, fewer copies.
  std::vector<std::vector<LayerPlacement>> fewer_copies;
};

// Rank r holds experts [r * n / R, (r + 1) * n / R) (the first n % R ranks one more).
LayerPlacement PlaceContiguousLayer(int layer_id, int num_experts, int num_ranks);

StatusOr<PlaceResult> Place(const Trace& profile, const PlaceOptions& options);

}  // namespace epserve::placement
