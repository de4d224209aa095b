// `epserve bench ...`: benchmarks that print what they measure (tables, or one JSON object
// with --json). Field names are documented in docs/benchmarks.md.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "kernels/gemm_peak.h"
#include "kernels/matmul_fast.h"
#include "kernels/membw.h"
#include "model/synthetic.h"
#include "runtime/decode_bench.h"
#include "runtime/loaded_model.h"
#include "tools/bench_decode_gpu.h"
#include "tools/bench_model.h"
#include "tools/command.h"
#include "tools/flag_checks.h"

namespace epserve::tools {

namespace {

struct DecodeFlags {
  BenchModelFlags model;
  std::vector<int> batches = {1, 8, 32};
  int prompt_len = 64, steps = 16, threads = 0;
  double bw_gib = 1.0;
  std::string compute = "exact";
  bool json = false;
  bool same_tokens = false;
  // --device cuda: the GPU benchmark on a preset's shapes (tools/bench_decode_gpu.h).
  std::string device = "cpu";
  GpuDecodeFlags gpu;
  // Flags given on the command line, to refuse those of the other device by name.
  std::vector<CLI::Option*> cpu_only, gpu_only;
  CLI::Option *batches_opt = nullptr, *steps_opt = nullptr, *dtype_opt = nullptr, *bw_opt = nullptr;
  CLI::Option *context_opt = nullptr, *prompt_len_opt = nullptr;
};

// --device cuda: the CPU flags are refused by name, the shared ones carried over.
Status RunDecodeOnGpu(const DecodeFlags& f) {
  for (const CLI::Option* o : f.cpu_only)
    if (o->count() > 0)
      return Status::InvalidArgument(o->get_name() + " is a CPU bench decode flag; with --device " +
                                     f.device + " the model is a preset made on the GPU");
  GpuDecodeFlags g = f.gpu;
  g.device = f.device;
  if (f.batches_opt->count() > 0) g.batches = f.batches;
  if (f.steps_opt->count() > 0) g.steps = f.steps;
  if (f.dtype_opt->count() > 0) g.dtype = f.model.dtype;
  if (f.bw_opt->count() > 0) g.bandwidth_gib = f.bw_gib;
  g.same_tokens = f.same_tokens;
  g.json = f.json;
  return RunGpuDecode(g);
}

Status RunDecode(const DecodeFlags& f) {
  if (f.device != "cpu") return RunDecodeOnGpu(f);
  for (const CLI::Option* o : f.gpu_only)
    if (o->count() > 0)
      return Status::InvalidArgument(o->get_name() + " is a GPU bench decode flag (--device cuda)");
  ASSIGN_OR_RETURN(BenchModel bm, LoadBenchModel(f.model));
  const std::string& dir = bm.dir;
  const LoadedModel* loaded = bm.loaded.get();
  // Checked before the bandwidth probe, which takes seconds.
  const int context = loaded->config.max_position_embeddings;
  const bool cached = f.context_opt->count() > 0;
  if (cached && f.prompt_len_opt->count() > 0)
    return Status::InvalidArgument(
        "--context and --prompt-len exclude each other (--context: that many cached positions "
        "written at random, no prompt)");
  const int64_t start = cached ? f.gpu.context + 1 : f.prompt_len;
  if (start + f.steps + 1 > context)
    return Status::InvalidArgument(std::string(cached ? "--context " : "--prompt-len ") +
                                   std::to_string(cached ? f.gpu.context : f.prompt_len) +
                                   " + --steps " + std::to_string(f.steps) +
                                   " exceed the model's context (" + std::to_string(context) +
                                   " positions, one kept free)");
  ThreadPool pool(f.threads > 0 ? f.threads : ThreadPool::DefaultThreads());
  // Bandwidth before and after the run; the better of each (the machine's capability, so the
  // fractions below are if anything understated).
  const kernels::BandwidthOptions bw_opt{.bytes = static_cast<int64_t>(f.bw_gib * (1 << 30))};
  kernels::BandwidthResult bw = kernels::MeasureBandwidth(bw_opt, pool);
  ASSIGN_OR_RETURN(auto rows, RunDecodeBench(*loaded, pool,
                                             {.batches = f.batches,
                                              .prompt_len = f.prompt_len,
                                              .context = cached ? f.gpu.context : 0,
                                              .decode_steps = f.steps,
                                              .compute = ComputeFromFlag(f.compute),
                                              .same_tokens = f.same_tokens}));
  const kernels::BandwidthResult bw_after = kernels::MeasureBandwidth(bw_opt, pool);
  bw.read_gbps = std::max(bw.read_gbps, bw_after.read_gbps);
  bw.triad_gbps = std::max(bw.triad_gbps, bw_after.triad_gbps);
  // The compute roof beside the bandwidth one: the engine's best GEMM rate in this run.
  const double peak_gflops = kernels::MeasureGemmPeakGflops({}, pool);
  if (f.json) {
    nlohmann::json j;
    j["model"] = dir;
    j["threads"] = pool.num_threads();
    j["compute"] = f.compute;
    j["requant"] = f.model.requant;
    j["same_tokens"] = f.same_tokens;
    j["context"] = cached ? f.gpu.context : 0;
    j["fast_kernel_available"] = kernels::FastMatMulAvailable();
    j["fast_kernel"] = kernels::FastKernelName(kernels::FastMatMulKernel());
    j["read_bandwidth_gbps"] = bw.read_gbps;
    j["triad_bandwidth_gbps"] = bw.triad_gbps;
    j["peak_gemm_gflops"] = peak_gflops;
    for (const auto& r : rows) {
      const double floor_ms = DecodeStepFloorMs(r, bw.read_gbps, peak_gflops);
      const double bw_ms = DecodeStepBandwidthMs(r, bw.read_gbps);
      j["rows"].push_back(
          {{"batch", r.batch},
           {"tokens_per_s", r.tokens_per_s},
           {"step_ms", r.step_ms},
           {"weight_bytes_per_step", r.weight_bytes_per_step},
           {"kv_bytes_per_step", r.kv_bytes_per_step},
           {"experts_touched_per_layer", r.experts_touched_per_layer},
           {"achieved_gbps", r.achieved_gbps},
           {"fraction_of_read_bandwidth", r.achieved_gbps / bw.read_gbps},
           {"median_step_ms", r.median_step_ms},
           {"median_step_gbps", r.median_step_gbps},
           {"median_step_fraction_of_read_bandwidth", r.median_step_gbps / bw.read_gbps},
           {"dense_bytes_per_step", r.dense_bytes_per_step},
           {"routed_bytes_per_step", r.routed_bytes_per_step},
           {"dense_flops_per_step", r.dense_flops_per_step},
           {"routed_flops_per_step", r.routed_flops_per_step},
           {"attention_flops_per_step", r.attention_flops_per_step},
           {"floor_ms", floor_ms},
           {"attainable_fraction_of_read_bandwidth", bw_ms / floor_ms},
           {"fraction_of_floor", floor_ms / r.step_ms},
           {"phase_ms",
            {{"attention_projections", r.phase_ms.gemm},
             {"attention", r.phase_ms.attention},
             {"gate", r.phase_ms.gate},
             {"shared_expert", r.phase_ms.shared_expert},
             {"routed_experts", r.phase_ms.routed_experts},
             {"lm_head", r.phase_ms.lm_head}}}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  if (f.same_tokens) std::printf("workload: every sequence token 0 (llama-batched-bench's)\n");
  std::printf("model: %s, threads: %d, compute: %s, requant: %s\n", dir.c_str(), pool.num_threads(),
              ComputeNote(f.compute).c_str(), RequantNote(f.model.requant).c_str());
  if (cached)
    std::printf("context: %lld cached positions per sequence, written at random (no prefill)\n",
                static_cast<long long>(f.gpu.context));
  std::printf("measured bandwidth: streaming read %.2f GB/s, STREAM triad %.2f GB/s\n",
              bw.read_gbps, bw.triad_gbps);
  std::printf("(mean over %d steps; 'median' = the median step by time, its own bytes / time)\n",
              f.steps);
  std::printf("%6s %10s %9s %12s %10s %10s %10s %9s %10s %9s\n", "batch", "tokens/s", "step ms",
              "weights MB", "KV MB", "experts/L", "GB/s", "of read", "median ms", "of read");
  for (const auto& r : rows) {
    std::printf("%6d %10.2f %9.2f %12.1f %10.2f %10.1f %10.2f %8.1f%% %10.2f %8.1f%%\n", r.batch,
                r.tokens_per_s, r.step_ms, r.weight_bytes_per_step / 1e6, r.kv_bytes_per_step / 1e6,
                r.experts_touched_per_layer, r.achieved_gbps,
                100.0 * r.achieved_gbps / bw.read_gbps, r.median_step_ms,
                100.0 * r.median_step_gbps / bw.read_gbps);
  }
  std::printf(
      "\ncompute roof: the engine's best GEMM (blocked kernel, cache-resident weight) %.1f "
      "GFLOP/s\n",
      peak_gflops);
  std::printf(
      "floor = per kind of work (dense, routed, attention) the longer of its bytes at the read "
      "bandwidth\n"
      "and its flops at that GEMM rate, summed; 'attainable' = bytes / bandwidth / floor, the "
      "best\n"
      "fraction of read bandwidth this machine's compute allows at that batch\n");
  std::printf("%6s %10s %10s %10s %10s %11s %10s\n", "batch", "GFLOP", "bw ms", "floor ms",
              "step ms", "attainable", "of floor");
  for (const auto& r : rows) {
    const double flops =
        r.dense_flops_per_step + r.routed_flops_per_step + r.attention_flops_per_step;
    const double floor_ms = DecodeStepFloorMs(r, bw.read_gbps, peak_gflops);
    const double bw_ms = DecodeStepBandwidthMs(r, bw.read_gbps);
    std::printf("%6d %10.2f %10.2f %10.2f %10.2f %10.1f%% %9.1f%%\n", r.batch, flops / 1e9, bw_ms,
                floor_ms, r.step_ms, 100.0 * bw_ms / floor_ms, 100.0 * floor_ms / r.step_ms);
  }
  std::printf("\nwhere a step goes, ms (projections = q/kv/o and the absorbed W_uk/W_uv):\n");
  std::printf("%6s %12s %10s %8s %8s %8s %8s %8s\n", "batch", "projections", "attention", "gate",
              "shared", "routed", "lm_head", "other");
  for (const auto& r : rows) {
    const StepTimes& p = r.phase_ms;
    const double known =
        p.gemm + p.attention + p.gate + p.shared_expert + p.routed_experts + p.lm_head;
    std::printf("%6d %12.2f %10.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n", r.batch, p.gemm, p.attention,
                p.gate, p.shared_expert, p.routed_experts, p.lm_head, r.step_ms - known);
  }
  return Status::Ok();
}

}  // namespace

void RegisterBenchCommand(CLI::App& app, CommandContext& ctx) {
  CLI::App* bench = app.add_subcommand(
      "bench", "Benchmarks; each prints what it measured (--json: one JSON object).");
  bench->require_subcommand(1);
  AddBenchKernelsCommand(bench, ctx);
  AddBenchSparseAttentionCommand(bench, ctx);
  AddBenchMoeLayerCommand(bench, ctx);
  AddBenchEngineCommand(bench, ctx);
  AddBenchMtpCommand(bench, ctx);
  AddBenchPrefillCommand(bench, ctx);
  AddBenchTokenizeCommand(bench, ctx);
  AddBenchGrammarCommand(bench, ctx);
#ifdef EPSERVE_HAVE_SERVE
  AddBenchServeCommand(bench, ctx);
#endif
  auto f = std::make_shared<DecodeFlags>();
  CLI::App* decode = bench->add_subcommand(
      "decode",
      "Decode tokens/s at several batch sizes on the bench model (generated on first use, >= 2 "
      "GB),\n"
      "bytes of weights + KV read per step, and that against this machine's memory bandwidth\n"
      "measured in the same run (streaming read; STREAM triad printed beside it); FLOPs per step\n"
      "against the engine's best GEMM rate measured in the same run, giving the least time a step\n"
      "can take and the best fraction of bandwidth this machine's compute allows.\n"
      "--device cuda: the same on the GPU at a preset's real shapes (--preset v2-lite | v3,\n"
      "--layers N: its first N layers), weights made in device memory (no checkpoint), the\n"
      "first --context positions of each sequence's latent cache random (no prefill); bytes\n"
      "per step against the GPU's HBM bandwidth (a device-to-device copy). docs/benchmarks.md");
  AddBenchModelFlags(decode, &f->model);
  f->dtype_opt = decode->get_option("--dtype");
  f->dtype_opt->description(
      "bf16 | fp8: of the default bench model; on the GPU of the preset (default: its released "
      "format, v3 fp8, others bf16)");
  f->cpu_only = {decode->get_option("--model"), decode->get_option("--weights"),
                 decode->get_option("--requant")};
  decode->add_option("--device", f->device, "cpu, or cuda / cuda:N (the GPU benchmark)")
      ->capture_default_str();
  f->batches_opt = decode
                       ->add_option("--batches,--batch", f->batches,
                                    "batch sizes (comma-separated; GPU default 1,32,128)")
                       ->delimiter(',')
                       ->check(IntRange(1, 4096))
                       ->capture_default_str();
  f->prompt_len_opt =
      decode
          ->add_option("--prompt-len", f->prompt_len, "prompt tokens per sequence before decoding")
          ->check(AtLeast(1))
          ->capture_default_str();
  f->cpu_only.push_back(f->prompt_len_opt);
  f->context_opt =
      decode
          ->add_option("--context", f->gpu.context,
                       "cached positions per sequence before the first step, written at random "
                       "(no prefill; CPU: instead of --prompt-len, for long contexts)")
          ->check(AtLeast(1))
          ->capture_default_str();
  f->steps_opt =
      decode->add_option("--steps", f->steps, "decode steps timed per batch size (GPU default 20)")
          ->check(AtLeast(1))
          ->capture_default_str();
  f->gpu_only = {
      decode
          ->add_option("--preset", f->gpu.preset,
                       "GPU: the model's shapes, tiny | tiny-v2 | bench | v2-lite | v3")
          ->check(CLI::IsMember(PresetNames()))
          ->capture_default_str(),
      decode->add_option("--layers", f->gpu.layers, "GPU: the preset's first N layers (0: all)")
          ->check(IntRange(0, 1000)),
      decode->add_option("--warmup", f->gpu.warmup, "GPU: untimed steps before the timed ones")
          ->check(IntRange(0, 1000))
          ->capture_default_str(),
      decode->add_option("--kv-dtype", f->gpu.kv_dtype, "GPU: latent cache f32 | bf16")
          ->check(CLI::IsMember({"f32", "bf16"}))
          ->capture_default_str(),
      decode->add_option("--seed", f->gpu.seed, "GPU: seed of the weights and cache")
          ->capture_default_str()};
  decode->add_flag("--same-tokens", f->same_tokens,
                   "llama-batched-bench's workload: every prompt and fed token is token 0, so all "
                   "sequences of a batch route to the same experts (default: each sequence its "
                   "own prompt and greedy tokens, distinct routes)");
  f->cpu_only.push_back(decode->add_option("--threads", f->threads, "worker threads (0: all cores)")
                            ->check(ThreadCount()));
  f->bw_opt = decode
                  ->add_option("--bandwidth-gib", f->bw_gib,
                               "buffer size of the bandwidth probe, GiB (GPU default 2)")
                  ->check(RealRange(0.001, 1024))
                  ->capture_default_str();
  AddComputeFlag(decode, &f->compute);
  f->cpu_only.push_back(decode->get_option("--compute"));
  decode->add_flag("--json", f->json, "print one JSON object instead of the table");
  decode->callback([f, &ctx] {
    Status st = RunDecode(*f);
    if (!st.ok()) ReportError(ctx, st.message());
  });
}

}  // namespace epserve::tools
