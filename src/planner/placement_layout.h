// Reads an `epserve place` placement file (docs/placement-format.md) as the planner's expert
// layout (expert_layout.h). Kept apart from the planner library, in `epserve_planner_placement`,
// so that the planner itself still depends only on src/base: this adapter links the placement
// library and calls its loader and its load predictor unchanged.
// Thread safety: pure functions.
#pragma once

#include <string>

#include "base/status.h"
#include "placement/placement.h"
#include "planner/expert_layout.h"

namespace epserve::planner {

// Each placed layer's slots; each copy's share of its expert's tokens is what the placement's
// routing policy sends it when every rank is the source of an equal share of the tokens
// (placement::PredictRankLoads for that expert alone). A rank holding two slots of one expert
// splits its share between them.
ExpertPlacement PlacementToLayout(const placement::Placement& placement, const std::string& source);

// LoadPlacement (validated) + PlacementToLayout; errors name the file.
StatusOr<ExpertPlacement> LoadPlacementLayout(const std::string& path);

}  // namespace epserve::planner
