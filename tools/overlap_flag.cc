#include "tools/overlap_flag.h"

#include "planner/crossover.h"
#include "planner/model_spec.h"
#include "planner/routing.h"
#include "tools/cpu_planner.h"
#include "tools/flag_checks.h"

namespace epserve::tools {

void OverlapFlags::AddTo(CLI::App* cmd, const std::string& group) {
  cmd->add_option("--overlap", mode,
                  "how each MoE layer hides its expert exchange: none; dispatch (the shared "
                  "expert runs while tokens travel); microbatch (two half batches 3 stages "
                  "apart, one computing while the other's exchange travels); auto (microbatch "
                  "from --microbatch-from tokens per DP group and step, or from the planner's "
                  "crossover for this deployment with --planner-hardware). Output is identical "
                  "in every mode")
      ->check(CLI::IsMember({"none", "dispatch", "microbatch", "auto"}))
      ->capture_default_str()
      ->group(group);
  cmd->add_option("--microbatch-from", microbatch_from,
                  "with --overlap auto: split steps of at least this many tokens per DP group")
      ->check(AtLeast(2))
      ->group(group);
  cmd->add_option("--planner-hardware", planner_hardware,
                  "with --overlap auto: a hardware catalog whose entry \"cpu\" (or only entry) "
                  "describes these ranks, from `epserve plan import-bench` (docs/planner.md, "
                  "\"The CPU engine\"); the planner's crossover batch becomes --microbatch-from")
      ->group(group);
}

StatusOr<OverlapOptions> OverlapFlags::Options(const std::string& model_dir, int ep, int tp,
                                               int ranks_per_machine, int query_len,
                                               std::string* note) const {
  const bool is_auto = mode == "auto";
  if (!is_auto && (microbatch_from > 0 || !planner_hardware.empty()))
    return Status::InvalidArgument(
        "--microbatch-from and --planner-hardware go with --overlap auto");
  if (!is_auto) {
    ASSIGN_OR_RETURN(const Overlap fixed, ParseOverlap(mode));
    return OverlapOptions{.mode = fixed};
  }
  if (microbatch_from > 0 && !planner_hardware.empty())
    return Status::InvalidArgument(
        "--overlap auto takes --microbatch-from or --planner-hardware, "
        "not both");
  if (microbatch_from > 0)
    return OverlapOptions{.mode = Overlap::kMicroBatch, .min_tokens = microbatch_from};
  if (planner_hardware.empty())
    return Status::InvalidArgument(
        "--overlap auto needs --microbatch-from N or --planner-hardware FILE (a catalog from "
        "`epserve plan import-bench`; docs/planner.md, \"The CPU engine\")");
  using namespace planner;
  ASSIGN_OR_RETURN(HardwareSpec hw, LoadCpuHardware(planner_hardware, "--planner-hardware"));
  ASSIGN_OR_RETURN(ModelSpec model, LoadModelConfig(model_dir + "/config.json"));
  ASSIGN_OR_RETURN(EfficiencyFactors eff, LoadPlannerEfficiency(""));
  hw.gpus_per_machine = ranks_per_machine;
  ASSIGN_OR_RETURN(Deployment d, MakeDeployment(model, ep, tp, ranks_per_machine));
  ASSIGN_OR_RETURN(RoutingModel routing, RoutingModel::Uniform(model, ep, d.RanksPerMachine()));
  const PlanContext ctx{.hw = &hw, .model = &model, .eff = &eff, .routing = &routing};
  // The CPU engine's latent cache is f32; 1000 cached tokens stand for a typical request.
  const Workload w{.kv_len = 1000, .query_len = query_len, .kv_element_bytes = 4};
  constexpr int kMaxBatch = 1024;
  ASSIGN_OR_RETURN(Crossover x, MicroBatchCrossover(ctx, d, w, kMaxBatch));
  const int64_t from =
      x.batch > 0 ? int64_t{x.batch} * query_len : int64_t{kMaxBatch + 1} * query_len;
  if (note != nullptr)
    *note = "overlap auto: " + hw.name + ", " + d.ToString() + ": micro-batching from " +
            std::to_string(from) + " tokens per DP group and step" +
            (x.batch > 0 ? " (the planner's crossover)"
                         : " (the planner finds no crossover up to 1024 requests)");
  return OverlapOptions{.mode = Overlap::kMicroBatch, .min_tokens = from};
}

std::vector<std::string> OverlapFlags::Args() const {
  std::vector<std::string> a = {"--overlap", mode};
  if (microbatch_from > 0)
    a.insert(a.end(), {"--microbatch-from", std::to_string(microbatch_from)});
  if (!planner_hardware.empty()) a.insert(a.end(), {"--planner-hardware", planner_hardware});
  return a;
}

}  // namespace epserve::tools
