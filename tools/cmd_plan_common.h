// Shared pieces of the `epserve plan` subcommands (cmd_plan.cc, cmd_plan_prefill.cc,
// cmd_plan_disagg.cc): the common flags, the files they load, the expert-layout flags
// (--redundant-experts, --placement) and the human-readable kernel table.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "planner/data_dir.h"
#include "planner/efficiency.h"
#include "planner/expert_layout.h"
#include "planner/hardware.h"
#include "planner/layer_model.h"
#include "planner/model_spec.h"
#include "planner/routing.h"
#include "tools/command.h"

namespace epserve::tools {

struct CommonFlags {
  std::string model = "deepseek-v3";
  std::string gpu = "H100";
  std::string hardware = planner::DefaultHardwarePath();
  std::string efficiency = planner::DefaultEfficiencyPath();
  std::string trace;
  int gpus_per_machine = 0;
  int batch = 128, kv_len = 5000, query_len = 2;
  double acceptance = 0.6;
  double kv_element_bytes = 2;
  std::string overlap = "best";
  bool json = false;
};

// Everything a plan command loads from files.
struct Loaded {
  planner::HardwareCatalog catalog;
  planner::HardwareSpec hw;
  planner::ModelSpec model;
  planner::EfficiencyFactors eff;
  std::optional<planner::RoutingTrace> trace;
  std::optional<planner::OverlapMode> overlap;  // nullopt: best per point
  planner::Workload workload;
};
StatusOr<Loaded> Load(const CommonFlags& f);

// Which flag groups a subcommand takes, each including the one before:
//   kNone    --model --gpu --hardware --efficiency --json
//   kPrefill --gpus-per-machine --kv-element-bytes --overlap --trace
//   kServing --query-len --acceptance
//   kDecode  --kv-len
enum class WorkloadFlags { kNone, kPrefill, kServing, kDecode };
void AddCommonOptions(CLI::App* cmd, CommonFlags* f, WorkloadFlags workload);

// --redundant-experts and --placement for one deployment.
struct LayoutFlags {
  int redundant = -1;  // -1: not given (0, or what --placement needs)
  std::string placement;
};
void AddLayoutOptions(CLI::App* cmd, LayoutFlags* f);
struct Layout {
  int redundant_experts = 0;
  std::optional<planner::ExpertPlacement> placement;
};
// Loads --placement (its rank count must be `ep`) and settles the redundant count: the flag's
// value, or, with a placement and no flag, enough slots for its fullest rank.
StatusOr<Layout> ResolveLayout(const LayoutFlags& f, const planner::ModelSpec& model, int ep);
StatusOr<planner::RoutingModel> BuildRouting(const Loaded& l, const planner::Deployment& d,
                                             const Layout& layout);

// "0,32", "0-64": like planner::ParseIntRanges, but 0 is allowed (redundant counts, chunks).
// Errors name `flag` and the bad item.
StatusOr<std::vector<int>> ParseNonNegativeList(const std::string& text, const std::string& flag);

// The input files of the common flags (a --model that names a preset matches no file).
std::vector<std::string> InputFiles(const CommonFlags& f);
void Print(const nlohmann::json& json);
nlohmann::json InputsJson(const Loaded& l, const CommonFlags& f);
void PrintLayerTable(const planner::LayerBreakdown& layer);

// `plan prefill` (cmd_plan_prefill.cc) and `plan disagg` (cmd_plan_disagg.cc).
void AddPlanPrefillCommand(CLI::App* plan, CommandContext& ctx);
void AddPlanDisaggCommand(CLI::App* plan, CommandContext& ctx);

}  // namespace epserve::tools
