// `epserve bench engine`: offered load on the serving engine, continuous batching against the
// old static batches in the same run (runtime/engine_bench.h).
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "runtime/engine_bench.h"
#include "runtime/loaded_model.h"
#include "tools/command.h"
#include "tools/flag_checks.h"

namespace epserve::tools {

namespace {

struct BenchEngineFlags {
  std::string model;
  std::string preset = "bench";
  std::string dtype = "fp8";
  EngineBenchOptions load;
  std::string kv_dtype = "bf16";
  std::string mtp = "off";
  int threads = 0;
  bool json = false;
};

nlohmann::json ToJson(const LoadSummary& s) {
  return {{"mode", s.mode},
          {"seconds", s.seconds},
          {"prompt_tokens", s.prompt_tokens},
          {"output_tokens", s.output_tokens},
          {"computed_tokens", s.computed_tokens},
          {"tokens_in_per_s", s.tokens_in_per_s},
          {"tokens_out_per_s", s.tokens_out_per_s},
          {"ttft_s", {{"p50", s.ttft_p50}, {"p90", s.ttft_p90}, {"p99", s.ttft_p99}}},
          {"tpot_s", {{"p50", s.tpot_p50}, {"p90", s.tpot_p90}, {"p99", s.tpot_p99}}},
          {"peak_pool_use", s.peak_pool_use},
          {"prefix_hit_rate", s.prefix_hit_rate},
          {"steps", s.steps},
          {"preemptions", s.preemptions},
          {"draft_tokens", s.draft_tokens},
          {"accepted_draft_tokens", s.accepted_draft_tokens}};
}

Status Run(const BenchEngineFlags& f) {
  std::string dir = f.model;
  if (dir.empty()) {
    auto progress = [](int done, int total) {
      if (::isatty(2))
        std::fprintf(stderr, "\rwrote shard %d/%d%s", done, total, done == total ? "\n" : "");
    };
    ASSIGN_OR_RETURN(
        dir, EnsurePresetModel(f.preset, f.dtype == "fp8", f.preset == "bench" ? 4 : 1, progress));
  }
  const EngineBenchOptions& l = f.load;
  if (l.prompt_max < l.prompt_min)
    return Status::InvalidArgument("--prompt-max must be >= --prompt-min");
  if (l.output_max < l.output_min)
    return Status::InvalidArgument("--output-max must be >= --output-min");
  ASSIGN_OR_RETURN(auto loaded, LoadModel(dir, {.mtp = f.mtp == "on" ? LoadOptions::Mtp::kLoad
                                                                     : LoadOptions::Mtp::kSkip}));
  ThreadPool pool(f.threads > 0 ? f.threads : ThreadPool::DefaultThreads());
  Model model(loaded->config, *loaded->weights, pool);
  EngineBenchOptions o = f.load;
  ASSIGN_OR_RETURN(o.engine.kv_dtype, ParseKvDType(f.kv_dtype));
  o.engine.mtp = f.mtp == "on";
  RETURN_IF_ERROR(CheckMtp(loaded->config, o.engine.mtp).WithContextOnce(dir + "/config.json"));
  ASSIGN_OR_RETURN(EngineBenchResult r, RunEngineBench(model, o));
  const LoadSummary &c = r.continuous, &s = r.stat;
  if (f.json) {
    nlohmann::json j{{"model", dir},
                     {"threads", pool.num_threads()},
                     {"requests", o.num_requests},
                     {"rate", o.rate},
                     {"pool_blocks", r.pool_blocks},
                     {"block_size", r.block_size},
                     {"continuous", ToJson(c)},
                     {"static", ToJson(s)},
                     {"throughput_ratio", c.tokens_out_per_s / s.tokens_out_per_s}};
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  std::printf("model: %s, threads: %d\n", dir.c_str(), pool.num_threads());
  std::printf(
      "load: %d requests, Poisson %.2f/s, prompts %d-%d tokens (%.0f%% open with a common %d-token "
      "prefix), "
      "outputs %d-%d tokens\n",
      o.num_requests, o.rate, o.prompt_min, o.prompt_max, 100 * o.prefix_share, o.prefix_len,
      o.output_min, o.output_max);
  std::printf(
      "engine: budget %lld tokens/step, up to %d running, pool %lld blocks x %lld (%s); static "
      "batches of %d\n",
      static_cast<long long>(o.engine.max_batch_tokens), o.engine.max_running,
      static_cast<long long>(r.pool_blocks), static_cast<long long>(r.block_size),
      f.kv_dtype.c_str(), o.static_batch);
  std::printf("%-11s %8s %10s %10s %25s %25s %9s %9s %6s\n", "mode", "seconds", "in tok/s",
              "out tok/s", "TTFT s p50/p90/p99", "TPOT ms p50/p90/p99", "pool use", "prefix",
              "steps");
  for (const LoadSummary* x : {&c, &s}) {
    char ttft[64], tpot[64];
    std::snprintf(ttft, sizeof(ttft), "%.2f/%.2f/%.2f", x->ttft_p50, x->ttft_p90, x->ttft_p99);
    std::snprintf(tpot, sizeof(tpot), "%.1f/%.1f/%.1f", 1e3 * x->tpot_p50, 1e3 * x->tpot_p90,
                  1e3 * x->tpot_p99);
    std::printf("%-11s %8.2f %10.1f %10.1f %25s %25s %8.0f%% %8.0f%% %6lld\n", x->mode.c_str(),
                x->seconds, x->tokens_in_per_s, x->tokens_out_per_s, ttft, tpot,
                100 * x->peak_pool_use, 100 * x->prefix_hit_rate, static_cast<long long>(x->steps));
  }
  if (o.engine.mtp)
    for (const LoadSummary* x : {&c, &s})
      std::printf("mtp (%s): %lld of %lld drafts accepted (%.1f%%), %.2f tokens per decode step\n",
                  x->mode.c_str(), static_cast<long long>(x->accepted_draft_tokens),
                  static_cast<long long>(x->draft_tokens),
                  100.0 * x->accepted_draft_tokens / std::max<int64_t>(x->draft_tokens, 1),
                  1.0 + static_cast<double>(x->accepted_draft_tokens) /
                            std::max<int64_t>(x->draft_tokens, 1));
  std::printf(
      "continuous / static: output throughput %.2fx, TTFT p50 %.2fx, computed tokens %.2fx\n",
      c.tokens_out_per_s / s.tokens_out_per_s, c.ttft_p50 / std::max(s.ttft_p50, 1e-9),
      static_cast<double>(c.computed_tokens) / std::max<int64_t>(s.computed_tokens, 1));
  return Status::Ok();
}

}  // namespace

void AddBenchEngineCommand(CLI::App* bench, CommandContext& ctx) {
  auto f = std::make_shared<BenchEngineFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "engine",
      "Offered load on the serving engine (Poisson arrivals, mixed prompt/output lengths, a shared "
      "prefix):\n"
      "throughput, TTFT and TPOT percentiles, KV pool use and prefix hit rate, for continuous "
      "batching and for\n"
      "the same requests as static batches in the same run (docs/serving-engine.md).");
  cmd->add_option("--model", f->model, "checkpoint directory (default: the generated preset)");
  cmd->add_option("--preset", f->preset, "preset generated when --model is not given")
      ->capture_default_str();
  cmd->add_option("--dtype", f->dtype, "bf16 | fp8 weights of the generated preset")
      ->capture_default_str();
  cmd->add_option("--requests", f->load.num_requests, "requests offered")
      ->check(IntRange(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--rate", f->load.rate, "arrivals per second (Poisson; 0: all at once)")
      ->check(NonNegativeReal())
      ->capture_default_str();
  cmd->add_option("--prompt-min", f->load.prompt_min)->check(AtLeast(1))->capture_default_str();
  cmd->add_option("--prompt-max", f->load.prompt_max)->check(AtLeast(1))->capture_default_str();
  cmd->add_option("--output-min", f->load.output_min)->check(AtLeast(1))->capture_default_str();
  cmd->add_option("--output-max", f->load.output_max)->check(AtLeast(1))->capture_default_str();
  cmd->add_option("--prefix-share", f->load.prefix_share,
                  "share of requests opening with the common prefix")
      ->check(RealRange(0, 1))
      ->capture_default_str();
  cmd->add_option("--prefix-len", f->load.prefix_len, "tokens of the common prefix")
      ->check(AtLeast(0))
      ->capture_default_str();
  cmd->add_option("--static-batch", f->load.static_batch, "batch size of the static baseline")
      ->check(IntRange(1, 65536))
      ->capture_default_str();
  cmd->add_option("--max-batch-tokens", f->load.engine.max_batch_tokens,
                  "engine token budget per step")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_option("--max-running", f->load.engine.max_running)
      ->check(IntRange(1, 65536))
      ->capture_default_str();
  cmd->add_option("--kv-dtype", f->kv_dtype, "f32 | bf16")->capture_default_str();
  cmd->add_option("--seed", f->load.seed)->capture_default_str();
  cmd->add_option("--mtp", f->mtp,
                  "on: speculative decoding with the model's MTP module in both modes (the "
                  "bench preset has none: pass --model or --preset tiny); acceptance is printed")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--threads", f->threads, "worker threads (0: all cores)")->check(ThreadCount());
  cmd->add_flag("--json", f->json, "one JSON object instead of the table");
  cmd->callback([f, &ctx] {
    Status st = Run(*f);
    if (!st.ok()) ReportError(ctx, st.message());
  });
}

}  // namespace epserve::tools
