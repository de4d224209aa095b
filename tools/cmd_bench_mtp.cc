// `epserve bench mtp`: MTP speculative decoding against plain decoding in one run
// (runtime/mtp_bench.h), and with --planner-hardware the planner's prediction for the same model,
// batch, cache length and measured acceptance beside it (docs/serving-engine.md, "Speed:
// epserve bench mtp").
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "planner/model_spec.h"
#include "planner/routing.h"
#include "planner/step_model.h"
#include "runtime/loaded_model.h"
#include "runtime/mtp_bench.h"
#include "tools/command.h"
#include "tools/cpu_planner.h"
#include "tools/flag_checks.h"

namespace epserve::tools {

namespace {

struct BenchMtpFlags {
  std::string model;
  MtpBenchOptions bench;
  std::string kv_dtype = "f32";
  std::string planner_hardware, planner_efficiency;
  int threads = 0;
  bool json = false;
};

// The planner's view of one row: a decode step without MTP and one verifying a draft at the
// measured acceptance, on one rank (EP 1) of the calibrated CPU.
struct Planned {
  double off_step_ms = 0, on_step_ms = 0, tokens_per_step = 0, speedup = 0;
};

StatusOr<Planned> Plan(const planner::PlanContext& ctx, const planner::Deployment& d,
                       const MtpBenchOptions& o, double kv_bytes, const MtpBenchRow& row) {
  using namespace planner;
  // The cache length halfway through the decode stands for the whole of it.
  Workload w{.batch = row.batch,
             .kv_len = o.prompt_len + o.decode_tokens / 2,
             .query_len = 1,
             .acceptance_rate = 0,
             .kv_element_bytes = kv_bytes};
  const StepOptions so{.overlap = OverlapMode::kNone, .require_memory_fit = false};
  ASSIGN_OR_RETURN(StepEstimate off, EstimateStep(ctx, d, w, so));
  w.query_len = 2;
  w.acceptance_rate = row.acceptance;
  ASSIGN_OR_RETURN(StepEstimate on, EstimateStep(ctx, d, w, so));
  return Planned{.off_step_ms = off.step_us / 1e3,
                 .on_step_ms = on.step_us / 1e3,
                 .tokens_per_step = on.tokens_per_step,
                 .speedup = on.speed / off.speed};
}

Status Run(const BenchMtpFlags& f) {
  ASSIGN_OR_RETURN(auto loaded, LoadModel(f.model, {}));
  RETURN_IF_ERROR(CheckMtp(loaded->config, true).WithContextOnce(f.model + "/config.json"));
  MtpBenchOptions o = f.bench;
  ASSIGN_OR_RETURN(o.engine.kv_dtype, ParseKvDType(f.kv_dtype));
  if (o.prompt_len + o.decode_tokens + 2 > loaded->config.max_position_embeddings)
    return Status::InvalidArgument("--prompt-len + --decode-tokens exceed the model's context (" +
                                   std::to_string(loaded->config.max_position_embeddings) + ")");
  // The planner is set up (and its files checked) before the minutes of measuring.
  std::optional<planner::HardwareSpec> hw;
  std::optional<planner::EfficiencyFactors> eff;
  std::optional<planner::ModelSpec> spec;
  std::optional<planner::RoutingModel> routing;
  std::optional<planner::Deployment> d;
  if (!f.planner_hardware.empty()) {
    ASSIGN_OR_RETURN(hw, LoadCpuHardware(f.planner_hardware, "--planner-hardware"));
    ASSIGN_OR_RETURN(eff, LoadPlannerEfficiency(f.planner_efficiency));
    ASSIGN_OR_RETURN(spec, planner::LoadModelConfig(f.model + "/config.json"));
    hw->gpus_per_machine = 1;
    ASSIGN_OR_RETURN(d, planner::MakeDeployment(*spec, 1, 1, 1));
    ASSIGN_OR_RETURN(routing, planner::RoutingModel::Uniform(*spec, 1, 1));
  } else if (!f.planner_efficiency.empty()) {
    return Status::InvalidArgument("--planner-efficiency goes with --planner-hardware");
  }
  ThreadPool pool(f.threads > 0 ? f.threads : ThreadPool::DefaultThreads());
  Model model(loaded->config, *loaded->weights, pool);
  ASSIGN_OR_RETURN(std::vector<MtpBenchRow> rows, RunMtpBench(model, o));
  std::vector<std::optional<Planned>> planned(rows.size());
  if (hw) {
    const planner::PlanContext ctx{.hw = &*hw, .model = &*spec, .eff = &*eff, .routing = &*routing};
    for (size_t i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(planned[i], Plan(ctx, *d, o, KvDTypeBytes(o.engine.kv_dtype), rows[i]));
    }
  }
  if (f.json) {
    nlohmann::ordered_json j{{"model", f.model},
                             {"threads", pool.num_threads()},
                             {"prompt_len", o.prompt_len},
                             {"decode_tokens", o.decode_tokens},
                             {"repeats", o.repeats},
                             {"kv_dtype", f.kv_dtype},
                             {"rows", nlohmann::ordered_json::array()}};
    if (hw) j["planner_hardware"] = hw->name;
    for (size_t i = 0; i < rows.size(); ++i) {
      const MtpBenchRow& r = rows[i];
      nlohmann::ordered_json row{{"batch", r.batch},
                                 {"off_tokens_per_s", r.off_tokens_per_s},
                                 {"on_tokens_per_s", r.on_tokens_per_s},
                                 {"speedup", r.speedup},
                                 {"off_step_ms", r.off_step_ms},
                                 {"on_step_ms", r.on_step_ms},
                                 {"draft_tokens", r.draft_tokens},
                                 {"accepted_draft_tokens", r.accepted_draft_tokens},
                                 {"acceptance", r.acceptance},
                                 {"tokens_per_step", r.tokens_per_step},
                                 {"identical", r.identical}};
      if (planned[i])
        row["planned"] = {{"off_step_ms", planned[i]->off_step_ms},
                          {"on_step_ms", planned[i]->on_step_ms},
                          {"tokens_per_step", planned[i]->tokens_per_step},
                          {"speedup", planned[i]->speedup}};
      j["rows"].push_back(row);
    }
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  std::printf(
      "model: %s, threads: %d; %d-token prompts, %d output tokens each (greedy, EOS ignored), "
      "median of %d\n",
      f.model.c_str(), pool.num_threads(), o.prompt_len, o.decode_tokens, o.repeats);
  std::printf("%6s %11s %11s %8s %10s %10s %11s %12s %9s", "batch", "off tok/s", "mtp tok/s",
              "speedup", "off ms", "mtp ms", "acceptance", "tokens/step", "same");
  if (hw) std::printf(" | %13s %13s %15s", "planned off ms", "planned mtp ms", "planned speedup");
  std::printf("\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const MtpBenchRow& r = rows[i];
    std::printf("%6d %11.1f %11.1f %7.2fx %10.2f %10.2f %10.1f%% %12.2f %9s", r.batch,
                r.off_tokens_per_s, r.on_tokens_per_s, r.speedup, r.off_step_ms, r.on_step_ms,
                100 * r.acceptance, r.tokens_per_step, r.identical ? "yes" : "NO");
    if (planned[i])
      std::printf(" | %13.2f %13.2f %14.2fx", planned[i]->off_step_ms, planned[i]->on_step_ms,
                  planned[i]->speedup);
    std::printf("\n");
  }
  if (hw) std::printf("planner: %s, EP 1, at each row's measured acceptance\n", hw->name.c_str());
  return Status::Ok();
}

}  // namespace

void AddBenchMtpCommand(CLI::App* bench, CommandContext& ctx) {
  auto f = std::make_shared<BenchMtpFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "mtp",
      "MTP speculative decoding against plain decoding on a checkpoint with an MTP module, in one "
      "run:\n"
      "decode tokens/s of each (alternating, median of --repeats), the speed-up, acceptance, "
      "tokens per\n"
      "decode step, step times, and whether both gave the same tokens; with --planner-hardware "
      "the\n"
      "planner's step times and speed-up for the same batch and measured acceptance beside them.");
  cmd->add_option("--model", f->model,
                  "checkpoint with an MTP module (make-model --mtp-layers 1 [--mtp-weights "
                  "from-main])")
      ->required();
  cmd->add_option("--batches", f->bench.batches, "requests decoding together (comma-separated)")
      ->delimiter(',')
      ->check(IntRange(1, 4096))
      ->capture_default_str();
  cmd->add_option("--prompt-len", f->bench.prompt_len, "random prompt tokens per request")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_option("--decode-tokens", f->bench.decode_tokens, "output tokens per request")
      ->check(AtLeast(2))
      ->capture_default_str();
  cmd->add_option("--repeats", f->bench.repeats, "runs of each mode per batch (median)")
      ->check(IntRange(1, 1000))
      ->capture_default_str();
  cmd->add_option("--seed", f->bench.seed, "prompt seed")->capture_default_str();
  cmd->add_option("--kv-dtype", f->kv_dtype, "f32 | bf16 latent cache rows")->capture_default_str();
  cmd->add_option("--planner-hardware", f->planner_hardware,
                  "a hardware catalog whose entry \"cpu\" (or only entry) describes this machine, "
                  "from `epserve plan import-bench` (docs/planner.md, \"The CPU engine\")");
  cmd->add_option("--planner-efficiency", f->planner_efficiency,
                  "with --planner-hardware: efficiency factors (from `epserve plan calibrate`; "
                  "default: the planner's own)");
  cmd->add_option("--threads", f->threads, "worker threads (0: all cores)")->check(ThreadCount());
  cmd->add_flag("--json", f->json, "one JSON object instead of the table");
  cmd->callback([f, &ctx] {
    Status st = Run(*f);
    if (!st.ok()) ReportError(ctx, st.message());
  });
}

}  // namespace epserve::tools
