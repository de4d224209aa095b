// JSON forms of the planner's results, as `epserve plan ... --json` prints them. Field names and
// units are documented in docs/planner.md (times in microseconds, bytes, tokens/s).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "planner/disagg.h"
#include "planner/prefill_model.h"
#include "planner/step_model.h"
#include "planner/sweep.h"

namespace epserve::planner {

nlohmann::json DeploymentToJson(const Deployment& d);
nlohmann::json WorkloadToJson(const Workload& w);
nlohmann::json KernelCostToJson(const KernelCost& cost);
nlohmann::json LayerToJson(const LayerBreakdown& layer);
nlohmann::json MemoryToJson(const MemoryFit& fit);
nlohmann::json StepToJson(const StepEstimate& step);
// One sweep point without its per-kernel breakdowns (flat, for tables and plots).
nlohmann::json SweepPointToJson(const SweepPoint& point);
nlohmann::json SweepToJson(const SweepResult& result);
// Every point as CSV with a header row; columns as in SweepPointToJson.
std::string SweepToCsv(const SweepResult& result);
nlohmann::json PickToJson(const PickResult& pick);
nlohmann::json PrefillToJson(const PrefillEstimate& prefill);
nlohmann::json TtftToJson(const TtftEstimate& ttft);  // without the prefill it wraps
nlohmann::json DisaggToJson(const DisaggPlan& plan);

}  // namespace epserve::planner
