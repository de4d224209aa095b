// `--stats` for expert-parallel runs: each rank serializes what it measured; rank 0 formats
// per-MoE-layer traffic (rows and bytes to the same rank, the same machine, other machines),
// tokens received per rank and per expert, and a per-kernel time breakdown per rank with the
// max over ranks (attention, GEMM, GroupGEMM, shared expert, dispatch, combine, other).
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "model/model.h"
#include "runtime/ep_experts.h"

namespace epserve {

std::string SerializeRankStats(const StepTimes& times, const EpExperts& experts, double total_seconds);
std::string FormatStats(const std::vector<std::string>& rank_blobs, const std::vector<int>& node_of,
                        const ModelConfig& config);

}  // namespace epserve
