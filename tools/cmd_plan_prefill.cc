// `epserve plan prefill`: per-layer prefill time of a batch of prompts on one deployment, the
// whole prefill (chunked or not), and the time to first token at a prefill load (--rate).
// Model: src/planner/prefill_model.h; docs/planner.md "Prefill".
#include <cmath>
#include <cstdio>
#include <memory>

#include "planner/prefill_model.h"
#include "planner/report_json.h"
#include "planner/sweep.h"
#include "tools/cmd_plan_common.h"
#include "tools/flag_checks.h"

namespace epserve::tools {
namespace {

using namespace epserve::planner;

struct PrefillFlags {
  CommonFlags common;
  LayoutFlags layout;
  int ep = 32, tp = 1;
  std::string prompt_lens = "1024";
  int chunk = 0;
  int busy_groups = 0;
  double rate = -1;
  bool no_mtp = false;
  bool ignore_memory = false;
};

std::string SegmentsText(const std::vector<PrefillSegment>& segments) {
  std::string text;
  for (const PrefillSegment& s : segments) {
    if (!text.empty()) text += " ";
    text += std::to_string(static_cast<int64_t>(s.tokens));
    if (s.prefix > 0) text += "@" + std::to_string(static_cast<int64_t>(s.prefix));
  }
  return text;
}

void PrintPass(const PrefillPass& p) {
  const LayerBreakdown& moe = p.moe_layer;
  std::printf("MoE layer (%s): %.0f us = compute %.0f + dispatch %.0f + combine %.0f visible\n",
              OverlapModeName(moe.mode), moe.total_us, moe.compute_us, moe.dispatch.visible_us,
              moe.combine.visible_us);
  PrintLayerTable(moe);
  std::printf("  dispatch: %.0f us on the wire, %.2f MB/rank; combine: %.0f us, %.2f MB/rank\n",
              moe.dispatch.transfer_us, moe.dispatch.bytes / 1e6, moe.combine.transfer_us,
              moe.combine.bytes / 1e6);
  std::printf(
      "  routing: %.2f experts touched per rank, %.1f tokens per expert, %.2f ranks per token, "
      "busiest rank / mean %.3f\n",
      moe.touched_experts, moe.tokens_per_expert, moe.destinations_per_token,
      moe.rank_rows_max_over_mean);
  std::printf("Dense layer: %.0f us\n", p.dense_layer.total_us);
}

Status RunPrefill(const PrefillFlags& f) {
  ASSIGN_OR_RETURN(Loaded l, Load(f.common));
  ASSIGN_OR_RETURN(std::vector<int> lens, ParseIntRanges(f.prompt_lens, "--prompt-lens"));
  if (f.rate >= 0 && lens.size() != 1) {
    return Status::InvalidArgument(
        "--rate prices prompts of one length: give one --prompt-lens "
        "value, not " +
        std::to_string(lens.size()));
  }
  const int gpm = f.common.gpus_per_machine > 0 ? f.common.gpus_per_machine : l.hw.gpus_per_machine;
  ASSIGN_OR_RETURN(Layout layout, ResolveLayout(f.layout, l.model, f.ep));
  ASSIGN_OR_RETURN(Deployment d,
                   MakeDeployment(l.model, {.ep = f.ep,
                                            .tp = f.tp,
                                            .gpus_per_machine = gpm,
                                            .redundant_experts = layout.redundant_experts}));
  if (f.busy_groups > d.dp) {
    return Status::InvalidArgument("--busy-groups " + std::to_string(f.busy_groups) +
                                   " exceeds the " + std::to_string(d.dp) + " DP groups of " +
                                   d.ToString());
  }
  ASSIGN_OR_RETURN(RoutingModel routing, BuildRouting(l, d, layout));
  const PlanContext pc{.hw = &l.hw, .model = &l.model, .eff = &l.eff, .routing = &routing};
  const MtpPrefill mtp = f.no_mtp ? MtpPrefill::kWithoutMtp : MtpPrefill::kWithMtp;
  ASSIGN_OR_RETURN(PrefillEstimate est,
                   EstimatePrefill(pc, d,
                                   {.prompt_lens = lens,
                                    .chunk_tokens = f.chunk,
                                    .busy_groups = f.busy_groups,
                                    .overlap = l.overlap,
                                    .mtp = mtp,
                                    .kv_element_bytes = f.common.kv_element_bytes,
                                    .require_memory_fit = !f.ignore_memory}));
  std::optional<TtftEstimate> ttft;
  if (f.rate >= 0) {
    ASSIGN_OR_RETURN(TtftEstimate t, EstimateTtft(pc, d,
                                                  {.prompt_len = lens[0],
                                                   .rate = f.rate,
                                                   .chunk_tokens = f.chunk,
                                                   .overlap = l.overlap,
                                                   .mtp = mtp,
                                                   .kv_element_bytes = f.common.kv_element_bytes}));
    ttft = std::move(t);
  }
  if (f.common.json) {
    nlohmann::json inputs = InputsJson(l, f.common);
    inputs["expert_layout"] = routing.layout_source();
    inputs["prompt_lens"] = lens;
    inputs["chunk_tokens"] = f.chunk;
    inputs["mtp"] = mtp == MtpPrefill::kWithMtp;
    nlohmann::json out = {{"command", "plan prefill"},
                          {"inputs", inputs},
                          {"deployment", DeploymentToJson(d)},
                          {"prefill", PrefillToJson(est)},
                          {"ttft", nullptr}};
    if (ttft) {
      out["ttft"] = TtftToJson(*ttft);
      out["ttft"]["rate"] = f.rate;
      out["ttft"]["prompt_len"] = lens[0];
    }
    Print(out);
    return Status::Ok();
  }
  std::printf("%s on %s: %s, %d slots per rank (%s); %d of %d DP groups prefilling\n",
              l.model.name.c_str(), l.hw.name.c_str(), d.ToString().c_str(),
              d.SlotsPerRank(l.model), routing.layout_source().c_str(), est.busy_groups, d.dp);
  std::printf("prompts per DP group: %s (%.0f tokens), %s, MTP layers %s\n", f.prompt_lens.c_str(),
              est.prompt_tokens,
              f.chunk > 0 ? ("chunks of " + std::to_string(f.chunk) + " tokens").c_str()
                          : "whole prompts in one pass",
              mtp == MtpPrefill::kWithMtp ? "included" : "left out");
  std::printf("pass 1 of %zu: chunks %s (tokens@prefix)\n", est.passes.size(),
              SegmentsText(est.passes[0].segments).c_str());
  PrintPass(est.passes[0]);
  if (est.passes.size() > 1) {
    std::printf("  %4s %-28s %-16s %10s %10s\n", "pass", "chunks (tokens@prefix)", "mode", "MoE us",
                "pass ms");
    for (size_t i = 0; i < est.passes.size(); ++i) {
      const PrefillPass& p = est.passes[i];
      std::printf("  %4zu %-28s %-16s %10.0f %10.2f\n", i + 1, SegmentsText(p.segments).c_str(),
                  OverlapModeName(p.mode), p.moe_layer.total_us, p.pass_us / 1e3);
    }
  }
  double moe = 0, dense = 0, mtp_us = 0, head = 0, overhead = 0;
  for (const PrefillPass& p : est.passes) {
    moe += p.moe_layers_us;
    dense += p.dense_layers_us;
    mtp_us += p.mtp_us;
    head += p.lm_head_us;
    overhead += p.overhead_us;
  }
  std::printf("Prefill: %.2f ms (MoE %.2f, dense %.2f, MTP %.2f, LM head %.2f, overhead %.2f)\n",
              est.total_us / 1e3, moe / 1e3, dense / 1e3, mtp_us / 1e3, head / 1e3, overhead / 1e3);
  std::printf("Throughput: %.0f prompt tokens/s per GPU, %.0f per machine\n",
              est.tokens_per_s_per_gpu, est.tokens_per_s_per_machine);
  std::printf("Memory per GPU: weights %.1f GB, KV of these prompts %.2f GB, free %.1f GB\n",
              est.memory.weight_bytes / 1e9, est.memory.kv_bytes_per_request / 1e9,
              est.memory.free_for_kv_bytes / 1e9);
  if (ttft) {
    if (!ttft->stable) {
      std::printf(
          "TTFT at %.2f prompts/s: overloaded (utilization %.2f >= 1: one %d-token "
          "prompt takes %.2f ms per DP group)\n",
          f.rate, ttft->utilization, lens[0], ttft->service_us / 1e3);
    } else {
      std::printf(
          "TTFT at %.2f prompts/s (%.3f per DP group): service %.2f ms with %d of %d "
          "groups busy, utilization %.3f, queue %.2f ms: TTFT %.2f ms\n",
          f.rate, f.rate / d.dp, ttft->service_us / 1e3, ttft->busy_groups, d.dp, ttft->utilization,
          ttft->wait_us / 1e3, ttft->ttft_us / 1e3);
    }
  }
  return Status::Ok();
}

}  // namespace

void AddPlanPrefillCommand(CLI::App* plan, CommandContext& ctx) {
  auto f = std::make_shared<PrefillFlags>();
  CLI::App* cmd = plan->add_subcommand(
      "prefill",
      "per-layer prefill time of a batch of prompts (MLA in MHA form, chunked prefill) and the "
      "time to first token at a prefill load");
  AddCommonOptions(cmd, &f->common, WorkloadFlags::kPrefill);
  AddLayoutOptions(cmd, &f->layout);
  cmd->add_option("--ep", f->ep, "expert-parallel ranks (GPUs)")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_option("--tp", f->tp, "GPUs per DP group")->check(AtLeast(1))->capture_default_str();
  cmd->add_option("--prompt-lens", f->prompt_lens,
                  "prompt lengths one DP group prefills together, in arrival order (list: "
                  "1024,4096 or ranges)")
      ->capture_default_str();
  cmd->add_option("--chunk", f->chunk,
                  "most prompt tokens per forward pass per DP group (chunked prefill); 0: whole "
                  "prompts in one pass")
      ->check(IntRange(0, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--busy-groups", f->busy_groups,
                  "DP groups prefilling such a batch at once (their rows share the GroupGEMM); "
                  "0: all")
      ->check(IntRange(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--rate", f->rate,
                  "prompts per second arriving at the deployment: also print the time to first "
                  "token at that load (one --prompt-lens value)")
      ->check(NonNegativeReal());
  cmd->add_flag("--no-mtp", f->no_mtp,
                "leave the MTP layers out (they prefill their own latent cache by default)");
  cmd->add_flag("--ignore-memory", f->ignore_memory,
                "price the prefill even if the prompts' KV cache does not fit");
  cmd->callback([f, &ctx] {
    Status st = RunPrefill(*f);
    if (!st.ok()) ReportError(ctx, st.message());
  });
}

}  // namespace epserve::tools
