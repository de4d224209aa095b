#include "tools/engine_flags.h"

#include <cstdio>

#include "grammar/grammar.h"
#include "runtime/grammar_constraint.h"
#include "runtime/model_family.h"
#include "tools/command.h"
#include "tools/flag_checks.h"

namespace epserve::tools {

void EngineFlags::AddTo(CLI::App* cmd) {
  const char* g = "Engine";
  cmd->add_option("--max-batch-tokens", max_batch_tokens, "token budget of one engine step")
      ->check(IntRange(1, 1 << 20))
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--max-running", max_running, "requests holding cache blocks at once")
      ->check(IntRange(1, 1 << 16))
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--block-size", block_size, "positions per cache block")
      ->check(IntRange(1, 1 << 16))
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--kv-dtype", kv_dtype, "latent cache elements: f32 or bf16")
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--kv-memory", kv_memory,
                  "cache pool of each DP group: bytes (K/M/G suffix) or a share of the memory "
                  "available at start (N%)")
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--mtp", mtp,
                  "on: speculative decoding with the model's MTP module (one drafted token per "
                  "decode; greedy output identical, sampled output of the same distribution)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--threads", threads,
                  "compute threads per rank (default: the machine's cores / its ranks)")
      ->check(ThreadCount())
      ->group(g);
  cmd->add_option("--grammar-cache-mb", grammar_cache_mb,
                  "bound on the compiled structured-output grammars (schemas, tool lists) each "
                  "process keeps, mask caches included, in MiB")
      ->check(IntRange(0, 1 << 20))
      ->capture_default_str()
      ->group(g);
  AddComputeFlag(cmd, &compute)->group(g);
  AddRequantFlag(cmd, &requant)->group(g);
  device.AddTo(cmd)->group(g);
  overlap.AddTo(cmd, g);
}

StatusOr<EngineOptions> EngineFlags::Options(const std::string& model_dir, const ModelConfig& c,
                                             int ep, int tp, int ranks_per_machine,
                                             std::string* overlap_note) const {
  ASSIGN_OR_RETURN(EngineOptions eo,
                   Common(model_dir, c.eos_token_ids, ep, tp, ranks_per_machine, overlap_note));
  RETURN_IF_ERROR(CheckMtp(c, eo.mtp));
  ASSIGN_OR_RETURN(int64_t kv_bytes, ParseKvMemory(kv_memory));
  eo.num_blocks = KvMemoryBlocks(c, eo.kv_dtype, block_size, kv_bytes, eo.mtp);
  if (eo.num_blocks < 1)
    return Status::InvalidArgument("--kv-memory " + kv_memory + " holds not one cache block");
  return eo;
}

StatusOr<EngineOptions> EngineFlags::OptionsFor(const std::string& model_dir,
                                                const ForwardPass& model,
                                                const std::vector<int32_t>& eos_ids, int ep, int tp,
                                                int ranks_per_machine,
                                                std::string* overlap_note) const {
  ASSIGN_OR_RETURN(EngineOptions eo,
                   Common(model_dir, eos_ids, ep, tp, ranks_per_machine, overlap_note));
  RETURN_IF_ERROR(model.CheckEngineOptions(eo.kv_dtype, eo.mtp, eo.overlap, eo.compute));
  ASSIGN_OR_RETURN(int64_t kv_bytes, ParseKvMemory(kv_memory));
  eo.num_blocks =
      KvMemoryBlocks(model.CacheLayout(eo.kv_dtype, eo.mtp), eo.kv_dtype, block_size, kv_bytes);
  if (eo.num_blocks < 1)
    return Status::InvalidArgument("--kv-memory " + kv_memory + " holds not one cache block");
  return eo;
}

StatusOr<EngineOptions> EngineFlags::Common(const std::string& model_dir,
                                            const std::vector<int32_t>& eos_ids, int ep, int tp,
                                            int ranks_per_machine,
                                            std::string* overlap_note) const {
  if (max_batch_tokens < 1) return Status::InvalidArgument("--max-batch-tokens must be >= 1");
  if (max_running < 1) return Status::InvalidArgument("--max-running must be >= 1");
  if (block_size < 1) return Status::InvalidArgument("--block-size must be >= 1");
  if (threads < 0) return Status::InvalidArgument("--threads must be >= 0");
  ApplyProcessWide();
  ASSIGN_OR_RETURN(KvDType dtype, ParseKvDType(kv_dtype));
  EngineOptions eo{.max_batch_tokens = max_batch_tokens,
                   .max_running = max_running,
                   .block_size = block_size,
                   .kv_dtype = dtype,
                   .mtp = mtp == "on",
                   .compute = ComputeFromFlag(compute)};
  ASSIGN_OR_RETURN(eo.overlap, overlap.Options(model_dir, ep, tp, ranks_per_machine, eo.mtp ? 2 : 1,
                                               overlap_note));
  eo.default_stop_ids = eos_ids;
  // Structured outputs and forced tool calls (runtime/grammar_constraint.h): the tokenizer is
  // read on the first request that asks for them.
  eo.constraints = GrammarConstraintFactory(model_dir, eo.default_stop_ids);
  return eo;
}

std::vector<std::string> EngineFlags::Args() const {
  std::vector<std::string> a = {"--max-batch-tokens",
                                std::to_string(max_batch_tokens),
                                "--max-running",
                                std::to_string(max_running),
                                "--block-size",
                                std::to_string(block_size),
                                "--kv-dtype",
                                kv_dtype,
                                "--kv-memory",
                                kv_memory,
                                "--mtp",
                                mtp,
                                "--compute",
                                compute,
                                "--requant",
                                requant};
  if (threads > 0) a.insert(a.end(), {"--threads", std::to_string(threads)});
  a.insert(a.end(), {"--grammar-cache-mb", std::to_string(grammar_cache_mb)});
  if (device.cuda()) a.insert(a.end(), {"--device", device.device});
  const std::vector<std::string> o = overlap.Args();
  a.insert(a.end(), o.begin(), o.end());
  return a;
}

void EngineFlags::ApplyProcessWide() const {
  grammar::SetGrammarCacheBytes(static_cast<size_t>(grammar_cache_mb) << 20);
}

StatusOr<std::unique_ptr<LocalEngine>> StartLocalEngine(const std::string& dir,
                                                        const EngineFlags& f) {
  auto e = std::make_unique<LocalEngine>();
  ASSIGN_OR_RETURN(const ModelFamily family, DetectModelFamily(dir));
  if (family == ModelFamily::kDeepSeekV4) {
    if (f.device.cuda())
      return Status::InvalidArgument(dir + " is a DeepSeek-V4 checkpoint: --device " +
                                     f.device.device + ": the GPU backend does not run V4 yet");
    if (f.requant != "none")
      return Status::InvalidArgument(dir + " is a DeepSeek-V4 checkpoint: --requant " + f.requant +
                                     " is not implemented for V4");
    ASSIGN_OR_RETURN(e->v4_weights, v4::V4Weights::Load(dir));
    e->pool =
        std::make_unique<ThreadPool>(f.threads > 0 ? f.threads : ThreadPool::DefaultThreads());
    e->v4_model = std::make_unique<v4::V4Model>(*e->v4_weights, *e->pool);
    std::printf("model: %s\n", e->v4_model->Describe().c_str());
    std::string note;
    ASSIGN_OR_RETURN(
        EngineOptions eo,
        f.OptionsFor(dir, *e->v4_model, e->v4_weights->config().eos_token_ids, 1, 1, 1, &note));
    if (!note.empty()) std::printf("%s\n", note.c_str());
    std::printf("KV cache: %lld blocks x %lld positions (%s)\n",
                static_cast<long long>(eo.num_blocks), static_cast<long long>(eo.block_size),
                KvDTypeName(eo.kv_dtype));
    e->engine = std::make_unique<Engine>(*e->v4_model, eo);
    return e;
  }
  ASSIGN_OR_RETURN(e->loaded, LoadModel(dir, {.requant = RequantFromFlag(f.requant),
                                              .mtp = f.mtp == "on" ? LoadOptions::Mtp::kLoad
                                                                   : LoadOptions::Mtp::kSkip}));
  std::printf("%s\n", DescribeLoad(*e->loaded, dir).c_str());
  std::string note;
  ASSIGN_OR_RETURN(EngineOptions eo, f.Options(dir, e->loaded->config, 1, 1, 1, &note));
  if (!note.empty()) std::printf("%s\n", note.c_str());
  e->pool = std::make_unique<ThreadPool>(f.threads > 0 ? f.threads : ThreadPool::DefaultThreads());
  e->model = std::make_unique<Model>(e->loaded->config, *e->loaded->weights, *e->pool);
  e->experts =
      std::make_unique<LocalExperts>(*e->loaded->weights, *e->pool, ExpertInputFormat::kF32);
  e->model->SetExperts(e->experts.get());
  ASSIGN_OR_RETURN(e->device, AttachDevice({.device = f.device.device,
                                            .kv_memory = f.kv_memory,
                                            .mtp = eo.mtp,
                                            .compute_fast = f.compute != "exact",
                                            .requant = f.requant != "none"},
                                           *e->loaded, e->model.get(), &eo));
  std::printf("KV cache: %lld blocks x %lld positions (%s)\n",
              static_cast<long long>(eo.num_blocks), static_cast<long long>(eo.block_size),
              KvDTypeName(eo.kv_dtype));
  e->engine = std::make_unique<Engine>(*e->model, eo);
  return e;
}

}  // namespace epserve::tools
