// `epserve bench prefill`: the prompt-processing rate of one long prompt, warm, as llama-bench
// measures `pp512` (runtime/prefill_bench.h; docs/benchmarks.md, "Side by side with
// ik_llama.cpp").
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "kernels/matmul_fast.h"
#include "runtime/prefill_bench.h"
#include "tools/bench_model.h"
#include "tools/command.h"
#include "tools/flag_checks.h"

namespace epserve::tools {

namespace {

struct PrefillFlags {
  BenchModelFlags model;
  int tokens = 512, step_tokens = 0, repeats = 3, threads = 0;
  std::string compute = "exact";
  bool json = false;
};

Status Run(const PrefillFlags& f) {
  ASSIGN_OR_RETURN(BenchModel bm, LoadBenchModel(f.model));
  const std::string& dir = bm.dir;
  const LoadedModel* loaded = bm.loaded.get();
  ThreadPool pool(f.threads > 0 ? f.threads : ThreadPool::DefaultThreads());
  ASSIGN_OR_RETURN(PrefillBenchResult r, RunPrefillBench(*loaded, pool,
                                                         {.tokens = f.tokens,
                                                          .step_tokens = f.step_tokens,
                                                          .repeats = f.repeats,
                                                          .compute = ComputeFromFlag(f.compute)}));
  const int step = f.step_tokens > 0 ? std::min(f.step_tokens, f.tokens) : f.tokens;
  const StepTimes& p = r.phase_ms;
  double mean_s = 0;
  for (double s : r.seconds) mean_s += s / r.seconds.size();
  if (f.json) {
    nlohmann::json j;
    j["model"] = dir;
    j["threads"] = pool.num_threads();
    j["compute"] = f.compute;
    j["requant"] = f.model.requant;
    j["fast_kernel"] = kernels::FastKernelName(kernels::FastMatMulKernel());
    j["tokens"] = f.tokens;
    j["step_tokens"] = step;
    j["seconds"] = r.seconds;
    j["tokens_per_s"] = r.mean_tokens_per_s;
    j["tokens_per_s_stddev"] = r.stddev_tokens_per_s;
    j["matmul_gflop"] = r.matmul_flops / 1e9;
    j["matmul_gflops_per_s"] = r.matmul_flops / mean_s / 1e9;
    j["phase_ms"] = {{"attention_projections", p.gemm},
                     {"attention", p.attention},
                     {"gate", p.gate},
                     {"shared_expert", p.shared_expert},
                     {"routed_experts", p.routed_experts},
                     {"lm_head", p.lm_head}};
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  std::printf("model: %s, threads: %d, compute: %s, requant: %s\n", dir.c_str(), pool.num_threads(),
              ComputeNote(f.compute).c_str(), RequantNote(f.model.requant).c_str());
  std::printf("prefill of one %d-token prompt, %d tokens per step: 1 warm-up, %zu timed\n",
              f.tokens, step, r.seconds.size());
  for (size_t i = 0; i < r.seconds.size(); ++i)
    std::printf("  run %zu: %8.1f ms  %9.1f tokens/s\n", i + 1, r.seconds[i] * 1e3,
                f.tokens / r.seconds[i]);
  std::printf(
      "prefill: %.1f +- %.1f tokens/s (mean +- sd over the runs); projections %.1f GFLOP "
      "per prefill at %.1f GFLOP/s\n",
      r.mean_tokens_per_s, r.stddev_tokens_per_s, r.matmul_flops / 1e9,
      r.matmul_flops / mean_s / 1e9);
  const double known =
      p.gemm + p.attention + p.gate + p.shared_expert + p.routed_experts + p.lm_head;
  std::printf(
      "\nwhere a prefill goes, ms (projections = q/kv/o, the absorbed W_uk/W_uv and dense "
      "MLPs):\n");
  std::printf("%12s %10s %8s %8s %8s %8s %8s\n", "projections", "attention", "gate", "shared",
              "routed", "lm_head", "other");
  std::printf("%12.1f %10.1f %8.1f %8.1f %8.1f %8.1f %8.1f\n", p.gemm, p.attention, p.gate,
              p.shared_expert, p.routed_experts, p.lm_head, mean_s * 1e3 - known);
  return Status::Ok();
}

}  // namespace

void AddBenchPrefillCommand(CLI::App* bench, CommandContext& ctx) {
  auto f = std::make_shared<PrefillFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "prefill",
      "Prompt processing of one long prompt on the bench model (generated on first use), as\n"
      "llama-bench's pp test: one untimed warm-up prefill, then --repeats timed prefills into an\n"
      "emptied cache; tokens/s of each, their mean and spread, and where the time goes.");
  AddBenchModelFlags(cmd, &f->model);
  cmd->add_option("--tokens", f->tokens, "prompt length")->check(AtLeast(1))->capture_default_str();
  cmd->add_option("--step-tokens", f->step_tokens,
                  "tokens per forward step (0: the whole prompt in one step, as llama-bench "
                  "with its default batch of 512)")
      ->check(AtLeast(0))
      ->capture_default_str();
  cmd->add_option("--repeats", f->repeats, "timed prefills after the warm-up")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_option("--threads", f->threads, "worker threads (0: all cores)")->check(ThreadCount());
  AddComputeFlag(cmd, &f->compute);
  cmd->add_flag("--json", f->json, "print one JSON object instead of the table");
  cmd->callback([f, &ctx] {
    Status st = Run(*f);
    if (!st.ok()) ReportError(ctx, st.message());
  });
}

}  // namespace epserve::tools
