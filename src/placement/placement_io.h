// The placement file (docs/placement-format.md) and SGLang's expert-location JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "placement/placement.h"

namespace epserve::placement {

inline constexpr char kPlacementFormat[] = "epserve-placement";
inline constexpr int kPlacementVersion = 1;

std::string PlacementToJson(const Placement& placement);
// Parses and validates (ValidatePlacement). `source` names the input in error messages.
StatusOr<Placement> PlacementFromJson(const std::string& text, const std::string& source);

Status SavePlacement(const Placement& placement, const std::string& path);
// Reads and validates a placement file; what the runtime calls for --placement.
StatusOr<Placement> LoadPlacement(const std::string& path);

// SGLang's physical_to_logical_map: one row per decoder layer (dense layers too, given the
// trivial map), num_ranks * slots_per_rank physical slots per row with equal slots per rank.
// A rank holding fewer experts than the fullest rank is padded with further copies of its own
// experts, heaviest first by `expert_load` (so padding adds no traffic), where `expert_load`
// is [layer][expert] (may be empty: then by slot order).
std::vector<std::vector<int>> SglangPhysicalToLogical(
    const Placement& placement, const std::vector<std::vector<double>>& expert_load);
// SaveSglangPlacement refuses a map of more entries (layers x ranks x slots per rank) than this.
inline constexpr int64_t kMaxSglangMapEntries = int64_t{1} << 26;
Status SaveSglangPlacement(const Placement& placement,
                           const std::vector<std::vector<double>>& expert_load,
                           const std::string& path);

}  // namespace epserve::placement
