// `epserve plan disagg`: the prefill and decode pools that meet a TTFT and a TPOT SLO at a
// request rate with the fewest machines, and the co-located deployment of the same size for
// comparison. Model: src/planner/disagg.h, colocated.cc; docs/planner.md "Disaggregation".
#include <cstdio>
#include <memory>

#include "planner/disagg.h"
#include "planner/report_json.h"
#include "planner/sweep.h"
#include "tools/cmd_plan_common.h"
#include "tools/flag_checks.h"

namespace epserve::tools {
namespace {

using namespace epserve::planner;

struct DisaggFlags {
  CommonFlags common;
  ServingTarget target;
  std::string gpus;  // default: --gpu
  std::string eps = "8,16,32,64,72,128,144,256", tps = "1,2,4,8", redundant = "0,32";
  std::string prefill_chunks = "0", colocated_chunks = "512,1024,2048,4096";
  std::string prefill_efficiency;  // default: --efficiency
  int max_replicas = 64;
};

const char* Machines(int n) { return n == 1 ? "machine" : "machines"; }

void PrintColocated(const char* label, const ColocatedPool& c, const ServingTarget& t) {
  std::printf(
      "%s: %d x %s %s = %d %s, chunks of %d tokens, %d requests decoding per DP "
      "group\n",
      label, c.replicas, c.gpu.c_str(), c.deployment.ToString().c_str(), c.Machines(),
      Machines(c.Machines()), c.chunk_tokens, c.batch);
  std::printf(
      "  decode step %.1f ms; a step with prompt chunks in %d of %d groups %.1f ms; "
      "%.0f%% of steps carry a chunk (utilization %.3f per group)\n",
      c.decode_step_us / 1e3, c.busy_groups, c.deployment.dp, c.mixed_step_us / 1e3,
      100 * c.mixed_fraction, c.utilization);
  const bool ttft_ok = c.ttft_us <= t.ttft_slo_ms * 1e3;
  const bool tpot_ok = c.tpot_us <= t.tpot_slo_ms * 1e3;
  std::printf("  TTFT %.1f ms (%s), TPOT %.2f ms (%s)\n", c.ttft_us / 1e3,
              ttft_ok ? "meets" : "MISSES", c.tpot_us / 1e3, tpot_ok ? "meets" : "MISSES");
}

Status RunDisagg(const DisaggFlags& f) {
  ASSIGN_OR_RETURN(Loaded l, Load(f.common));
  RETURN_IF_ERROR(f.target.Validate());
  EfficiencyFactors prefill_eff = l.eff;
  if (!f.prefill_efficiency.empty()) {
    ASSIGN_OR_RETURN(prefill_eff, LoadEfficiencyFile(f.prefill_efficiency));
  }
  std::vector<HardwareSpec> gpus;
  std::string names = f.gpus.empty() ? f.common.gpu : f.gpus;
  for (size_t start = 0; start <= names.size();) {
    size_t end = names.find(',', start);
    if (end == std::string::npos) end = names.size();
    StatusOr<HardwareSpec> hw = l.catalog.Find(names.substr(start, end - start));
    if (!hw.ok()) return Status::InvalidArgument("--gpus: " + hw.status().message());
    gpus.push_back(*hw);
    start = end + 1;
  }
  PoolSearch search;
  for (const HardwareSpec& hw : gpus) search.gpus.push_back(&hw);
  ASSIGN_OR_RETURN(search.ep_values, ParseIntRanges(f.eps, "--ep"));
  ASSIGN_OR_RETURN(search.tp_values, ParseIntRanges(f.tps, "--tp"));
  ASSIGN_OR_RETURN(search.redundant_values,
                   ParseNonNegativeList(f.redundant, "--redundant-experts"));
  ASSIGN_OR_RETURN(search.prefill_chunks,
                   ParseNonNegativeList(f.prefill_chunks, "--prefill-chunks"));
  ASSIGN_OR_RETURN(search.colocated_chunks,
                   ParseIntRanges(f.colocated_chunks, "--colocated-chunks"));
  search.gpus_per_machine = f.common.gpus_per_machine;
  search.max_replicas = f.max_replicas;
  const DisaggProblem problem{.model = &l.model,
                              .decode_eff = &l.eff,
                              .prefill_eff = &prefill_eff,
                              .trace = l.trace ? &*l.trace : nullptr,
                              .target = f.target,
                              .decode = {.query_len = f.common.query_len,
                                         .acceptance_rate = f.common.acceptance,
                                         .kv_element_bytes = f.common.kv_element_bytes,
                                         .overlap = l.overlap}};
  ASSIGN_OR_RETURN(DisaggPlan plan, PlanDisagg(problem, search));
  if (f.common.json) {
    nlohmann::json out = DisaggToJson(plan);
    out["command"] = "plan disagg";
    out["inputs"] = InputsJson(l, f.common);
    out["inputs"]["gpus"] = names;
    Print(out);
    return Status::Ok();
  }
  const ServingTarget& t = plan.target;
  std::printf(
      "%s: %d-token prompts, %d output tokens, %.2f requests/s; SLOs: TTFT <= %.0f ms, "
      "TPOT <= %.1f ms\n",
      l.model.name.c_str(), t.prompt_len, t.output_len, t.rate, t.ttft_slo_ms, t.tpot_slo_ms);
  const PrefillPool& p = plan.prefill;
  std::printf("prefill pool: %d x %s %s = %d %s, %s\n", p.replicas, p.gpu.c_str(),
              p.deployment.ToString().c_str(), p.Machines(), Machines(p.Machines()),
              p.chunk_tokens > 0 ? ("chunks of " + std::to_string(p.chunk_tokens)).c_str()
                                 : "whole prompts");
  std::printf(
      "  one prompt %.1f ms (%d of %d groups busy), utilization %.3f per group, queue "
      "%.1f ms, KV transfer %.1f ms (%.1f MB; NIC %.1f%% busy)\n",
      p.ttft.service_us / 1e3, p.ttft.busy_groups, p.deployment.dp, p.ttft.utilization,
      p.ttft.wait_us / 1e3, p.kv_transfer_us / 1e3, plan.kv_bytes_per_request / 1e6,
      100 * p.kv_link_utilization);
  std::printf("  TTFT %.1f ms\n", p.ttft.ttft_us / 1e3);
  const DecodePool& d = plan.decode;
  std::printf(
      "decode pool: %d x %s %s = %d %s, %d requests per DP group (%s; at most %d "
      "fit)\n",
      d.replicas, d.gpu.c_str(), d.deployment.ToString().c_str(), d.Machines(),
      Machines(d.Machines()), d.batch, OverlapModeName(d.step.mode), d.step.memory.max_batch);
  std::printf("  step %.1f ms, %.2f tokens per step: TPOT %.2f ms (%.1f tokens/s per request)\n",
              d.step.step_us / 1e3, d.step.tokens_per_step, d.tpot_us / 1e3, 1e6 / d.tpot_us);
  std::printf("total: %d machines (%d GPUs)\n", plan.machines, plan.gpus);
  if (plan.colocated_same_size) {
    PrintColocated("co-located, same machines", *plan.colocated_same_size, t);
  } else {
    std::printf(
        "co-located, same machines: no searched deployment of %d machines keeps up with "
        "the rate or fits in memory\n",
        plan.machines);
  }
  if (plan.colocated_smallest) {
    PrintColocated("smallest co-located meeting both SLOs", *plan.colocated_smallest, t);
  } else {
    std::printf("smallest co-located meeting both SLOs: none up to %d machines\n",
                3 * plan.machines);
  }
  return Status::Ok();
}

}  // namespace

void AddPlanDisaggCommand(CLI::App* plan, CommandContext& ctx) {
  auto f = std::make_shared<DisaggFlags>();
  CLI::App* cmd = plan->add_subcommand(
      "disagg",
      "prefill and decode pools that meet TTFT and TPOT SLOs at a request rate with the fewest\n"
      "machines (KV cache moved between them), and the co-located deployment of the same size");
  AddCommonOptions(cmd, &f->common, WorkloadFlags::kServing);
  cmd->add_option("--prompt-len", f->target.prompt_len, "prompt tokens per request")
      ->check(IntRange(1, 1 << 24))
      ->required();
  cmd->add_option("--output-len", f->target.output_len, "output tokens per request")
      ->check(IntRange(1, 1 << 24))
      ->required();
  cmd->add_option("--rate", f->target.rate, "requests per second (Poisson arrivals)")
      ->check(PositiveReal())
      ->required();
  cmd->add_option("--ttft-slo", f->target.ttft_slo_ms,
                  "time to first token, ms: queue + prefill + KV transfer (mean)")
      ->check(PositiveReal())
      ->required();
  cmd->add_option("--tpot-slo", f->target.tpot_slo_ms,
                  "time per output token, ms: decode step / tokens per step (mean)")
      ->check(PositiveReal())
      ->required();
  cmd->add_option("--gpus", f->gpus,
                  "GPU kinds either pool may use, e.g. H800,H200 (default: --gpu)");
  cmd->add_option("--ep", f->eps, "EP values to search")->capture_default_str();
  cmd->add_option("--tp", f->tps, "TP values to search")->capture_default_str();
  cmd->add_option("--redundant-experts", f->redundant,
                  "redundant expert slots to search with each EP (kept where (experts + R) % EP "
                  "== 0)")
      ->capture_default_str();
  cmd->add_option("--max-replicas", f->max_replicas, "most copies of one deployment per pool")
      ->check(IntRange(1, 4096))
      ->capture_default_str();
  cmd->add_option("--prefill-chunks", f->prefill_chunks,
                  "prefill pool chunk budgets to search (tokens per pass per DP group; 0: whole "
                  "prompts)")
      ->capture_default_str();
  cmd->add_option("--colocated-chunks", f->colocated_chunks,
                  "chunk budgets the co-located comparison searches")
      ->capture_default_str();
  cmd->add_option("--prefill-efficiency", f->prefill_efficiency,
                  "efficiency factors JSON for the prefill pool and the KV transfer (default: "
                  "--efficiency)");
  cmd->callback([f, &ctx] {
    Status st = RunDisagg(*f);
    if (!st.ok()) ReportError(ctx, st.message());
  });
}

}  // namespace epserve::tools
