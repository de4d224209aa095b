// The planner pointed at this machine's CPU ranks: a hardware catalog from `epserve plan
// import-bench` (docs/planner.md, "The CPU engine") and an efficiency file (default: the
// planner's own). Used by --overlap auto (the crossover batch) and bench mtp (the predicted
// speed-up beside the measured one).
#pragma once

#include <string>

#include "base/status.h"
#include "planner/efficiency.h"
#include "planner/hardware.h"

namespace epserve::tools {

// The catalog's entry "cpu", or its only entry. Errors name `flag` and the file.
StatusOr<planner::HardwareSpec> LoadCpuHardware(const std::string& path, const std::string& flag);

// `path`, or the planner's default efficiency file when empty.
StatusOr<planner::EfficiencyFactors> LoadPlannerEfficiency(const std::string& path);

}  // namespace epserve::tools
