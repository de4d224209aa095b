// Text tables and JSON for evaluation results (the output of `epserve place evaluate`).
#pragma once

#include <string>
#include <vector>

#include "placement/compare.h"
#include "placement/evaluate.h"
#include "placement/grace.h"

namespace epserve::placement {

// One row per strategy: copies kept / intra / cross (per token and rank), cross-machine copies
// (per token and machine), cross-machine GB, max/mean load, modeled time.
std::string FormatCompareTable(const std::vector<CompareRow>& rows);

// One row per layer and a total row.
std::string FormatLayerTable(const Evaluation& evaluation);

// The JSON object of docs/placement-results.md: {"strategies": {label: {...}}, ...}.
std::string CompareJson(const std::vector<CompareRow>& rows, const Topology& topology,
                        const CostModel& cost, int step_tokens_per_rank);
std::string EvaluationJson(const Evaluation& evaluation, const std::string& label);

// The U(r)/S(r) curves and replication decisions of GRACE, for --verbose.
std::string FormatGraceReport(const GraceLayerReport& report);

}  // namespace epserve::placement
