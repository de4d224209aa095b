// `epserve generate`: batched generation from token ids on one process.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/output_file.h"
#include "comm/communicator.h"
#include "io/npy.h"
#include "model/generation_config.h"
#include "model/v4/v4_model.h"
#include "model/v4/v4_weights.h"
#include "runtime/engine.h"
#include "runtime/ep_runner.h"
#include "runtime/generator.h"
#include "runtime/loaded_model.h"
#include "runtime/model_family.h"
#include "runtime/trace_recorder.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "tools/command.h"
#include "tools/device_flag.h"
#include "tools/flag_checks.h"
#include "tools/overlap_flag.h"
#include "tools/replace_flags.h"

namespace epserve::tools {

namespace {

struct GenerateFlags {
  std::string model;
  std::vector<std::string> prompts;
  std::vector<std::string> text_prompts;
  bool chat = false;
  int max_tokens = 16;
  std::string arrivals;
  std::string logits_out, tokens_out;
  std::string draft_logits_out;  // with --mtp on: every draft's MTP logits row
  float temperature = 0.0f, top_p = 1.0f;
  int top_k = 0;
  // Whether --temperature, --top-p, --top-k were given: those not given come from the
  // generation config when it sets them.
  bool temperature_set = false, top_p_set = false, top_k_set = false;
  std::string generation_config = "auto";  // auto | none | PATH (model/generation_config.h)
  bool ignore_eos = false;
  // Engine.
  std::string kv_dtype = "f32";
  std::string compute = "exact";
  std::string mtp = "off";
  OverlapFlags overlap;
  std::string kv_memory;  // bytes with an optional K/M/G suffix; empty: enough for all requests
  int64_t block_size = 64;
  int64_t max_batch_tokens = 256;
  int max_running = 64;
  bool no_prefix_cache = false;
  uint64_t seed = 0;
  int threads = 0;
  std::string expert_input = "f32";
  std::string trace_out;
  std::string weights = "copied";
  std::string requant = "none";
  DeviceFlag device;
  // Expert parallelism (under mpirun).
  int tp = 1;
  int ranks_per_node = 0;
  std::string a2a = "sparse";
  std::string placement;
  bool stats = false;
  ReplaceFlags replace;
  double timeout = 120.0;
  int kill_rank = -1, kill_step = -1, fail_load_rank = -1;
  bool stop_rank = false;
};

LoadOptions::Memory WeightMemory(const GenerateFlags& f) {
  return f.weights == "mapped" ? LoadOptions::Memory::kMapped : LoadOptions::Memory::kCopied;
}

StatusOr<std::vector<int32_t>> ParseIds(const std::string& text, size_t idx) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return Status::InvalidArgument("--prompt-ids #" + std::to_string(idx + 1) + ": \"" + item +
                                     "\" is not a token id");
    }
  }
  if (ids.empty())
    return Status::InvalidArgument("--prompt-ids #" + std::to_string(idx + 1) + " is empty");
  return ids;
}

// Token ids of a --prompt: encoded with BOS, or with --chat rendered as one user message with
// the model's chat template (which emits BOS itself) and a generation prompt.
StatusOr<std::vector<int32_t>> EncodePrompt(const GenerateFlags& f, const std::string& dir,
                                            const text::Tokenizer& tok, const std::string& text) {
  if (!f.chat) return tok.Encode(text, {.add_special_tokens = true});
  ASSIGN_OR_RETURN(text::ChatTemplate tmpl, text::LoadChatTemplate(dir + "/tokenizer_config.json"));
  nlohmann::ordered_json context = {{"messages", {{{"role", "user"}, {"content", text}}}},
                                    {"add_generation_prompt", true},
                                    {"bos_token", tok.bos_token()},
                                    {"eos_token", tok.eos_token()},
                                    {"tools", nullptr}};
  ASSIGN_OR_RETURN(std::string rendered, tmpl.Render(context));
  return tok.Encode(rendered);
}

StatusOr<std::vector<GenerateRequest>> BuildRequests(const GenerateFlags& f, const std::string& dir,
                                                     const text::Tokenizer* tok) {
  std::vector<GenerateRequest> reqs;
  if (f.chat && f.text_prompts.empty())
    return Status::InvalidArgument("--chat needs --prompt TEXT");
  if (!f.arrivals.empty()) {
    if (!f.prompts.empty() || !f.text_prompts.empty())
      return Status::InvalidArgument("give either --prompt-ids / --prompt or --arrivals, not both");
    ASSIGN_OR_RETURN(reqs, ReadArrivals(f.arrivals, f.max_tokens));
  } else {
    if (f.prompts.empty() && f.text_prompts.empty())
      return Status::InvalidArgument(
          "give --prompt-ids or --prompt (one per sequence), or --arrivals FILE");
    std::vector<std::vector<int32_t>> all;
    for (size_t i = 0; i < f.prompts.size(); ++i) {
      ASSIGN_OR_RETURN(auto ids, ParseIds(f.prompts[i], i));
      all.push_back(std::move(ids));
    }
    if (!f.text_prompts.empty() && tok == nullptr)
      return Status::NotFound(
          dir +
          "/tokenizer.json: --prompt needs the model's tokenizer (epserve make-model writes one)");
    for (const std::string& text : f.text_prompts) {
      ASSIGN_OR_RETURN(auto ids, EncodePrompt(f, dir, *tok, text));
      all.push_back(std::move(ids));
    }
    for (size_t i = 0; i < all.size(); ++i) {
      std::vector<int32_t> ids = std::move(all[i]);
      reqs.push_back({.prompt = std::move(ids),
                      .max_tokens = f.max_tokens,
                      .sampling = {.temperature = f.temperature,
                                   .top_p = f.top_p,
                                   .top_k = f.top_k,
                                   .seed = f.seed + static_cast<uint64_t>(i)},
                      .ignore_eos = f.ignore_eos,
                      .sequence_id = static_cast<uint32_t>(i)});
    }
  }
  if (f.max_tokens < 1) return Status::InvalidArgument("--max-tokens must be >= 1");
  return reqs;
}

StatusOr<EngineOptions> BuildEngineOptions(const GenerateFlags& f) {
  ASSIGN_OR_RETURN(KvDType dtype, ParseKvDType(f.kv_dtype));
  if (f.block_size < 1) return Status::InvalidArgument("--block-size must be >= 1");
  if (f.max_batch_tokens < 1) return Status::InvalidArgument("--max-batch-tokens must be >= 1");
  if (f.max_running < 1) return Status::InvalidArgument("--max-running must be >= 1");
  return EngineOptions{.max_batch_tokens = f.max_batch_tokens,
                       .max_running = f.max_running,
                       .block_size = f.block_size,
                       .kv_dtype = dtype,
                       .prefix_cache = !f.no_prefix_cache,
                       .keep_logits = !f.logits_out.empty(),
                       .mtp = f.mtp == "on",
                       .keep_draft_logits = !f.draft_logits_out.empty(),
                       .compute = ComputeFromFlag(f.compute)};
}

struct Timing {
  int64_t prefill_tokens, decode_tokens;
  double prefill_seconds, decode_seconds;
};
Status Report(const GenerateFlags& f, const std::vector<RequestResult>& results, int vocab,
              const Timing& t, const text::Tokenizer* tok);

// The model folder's tokenizer, or null when it has none (generate then prints ids only).
StatusOr<std::unique_ptr<text::Tokenizer>> MaybeTokenizer(const std::string& dir) {
  if (!std::filesystem::exists(dir + "/tokenizer.json")) return std::unique_ptr<text::Tokenizer>();
  return text::Tokenizer::Load(dir);
}

// "overlap: microbatch, 12 of 13 passes in two micro-batches"
void PrintOverlap(const OverlapOptions& o, int64_t split, int64_t passes) {
  std::printf("overlap: %s, %lld of %lld passes in two micro-batches\n", OverlapName(o.mode),
              static_cast<long long>(split), static_cast<long long>(passes));
}

// "mtp: 40 drafts, 31 accepted (77.5%), 1.78 tokens per decode step"
void PrintMtp(int64_t drafts, int64_t accepted) {
  std::printf("mtp: %lld drafts, %lld accepted (%.1f%%), %.2f tokens per decode step\n",
              static_cast<long long>(drafts), static_cast<long long>(accepted),
              drafts > 0 ? 100.0 * accepted / drafts : 0.0,
              drafts > 0 ? 1.0 + static_cast<double>(accepted) / drafts : 1.0);
}

void PrintPool(const EngineOptions& e, const KvLayout& layout, int64_t longest) {
  const int64_t tokens = e.num_blocks * e.block_size;
  const double mib = static_cast<double>(tokens) * layout.num_layers * layout.row_width *
                     KvDTypeBytes(e.kv_dtype) / (1 << 20);
  std::printf(
      "KV cache: %lld blocks x %lld positions = %lld tokens (%.1f MiB, %s); fits %lld request(s) "
      "of the longest, %lld tokens, at once\n",
      static_cast<long long>(e.num_blocks), static_cast<long long>(e.block_size),
      static_cast<long long>(tokens), mib, KvDTypeName(e.kv_dtype),
      static_cast<long long>(e.num_blocks / ((longest + e.block_size - 1) / e.block_size)),
      static_cast<long long>(longest));
}

int64_t Longest(const std::vector<GenerateRequest>& reqs) {
  int64_t longest = 1;
  for (const auto& r : reqs)
    longest = std::max<int64_t>(longest, static_cast<int64_t>(r.prompt.size()) + r.max_tokens);
  return longest;
}

// Under mpirun: every rank runs its DP group's share; rank 0 prints. Errors every rank sees
// alike are printed once (by rank 0); a rank's own failure is printed by that rank, and the job
// is aborted so no peer waits for it.
Status RunDistributed(const GenerateFlags& f, const std::string& dir,
                      const std::vector<GenerateRequest>& reqs, const EngineOptions& engine,
                      int64_t kv_bytes, const text::Tokenizer* tok) {
  ASSIGN_OR_RETURN(auto mpi,
                   comm::MpiWorld::Init(nullptr, nullptr, {.timeout_seconds = f.timeout}));
  EpRunOptions eo{.model_dir = dir,
                  .requests = reqs,
                  .engine = engine,
                  .kv_memory_bytes = kv_bytes,
                  .keep_logits = !f.logits_out.empty(),
                  .tp = f.tp,
                  .ranks_per_node = f.ranks_per_node,
                  .a2a = f.a2a == "padded" ? comm::A2aMode::kPadded : comm::A2aMode::kSparse,
                  .placement_path = f.placement,
                  .threads = f.threads,
                  .weights = WeightMemory(f),
                  .requant = RequantFromFlag(f.requant),
                  .kill_rank = f.kill_rank,
                  .kill_step = f.kill_step,
                  .stop_instead = f.stop_rank,
                  .fail_load_rank = f.fail_load_rank};
  eo.online = f.replace.Options();
  const int rank = mpi->world().rank();
  std::string note;
  StatusOr<OverlapOptions> overlap = f.overlap.Options(
      dir, mpi->world().size(), f.tp, f.ranks_per_node > 0 ? f.ranks_per_node : mpi->local_ranks(),
      engine.mtp ? 2 : 1, &note);
  if (!overlap.ok()) {  // every rank finds the same
    if (rank == 0) std::fprintf(stderr, "epserve: error: %s\n", overlap.status().message().c_str());
    return Status::Unavailable("");
  }
  if (rank == 0 && !note.empty()) std::printf("%s\n", note.c_str());
  eo.engine.overlap = *overlap;
  EpRunResult res;
  EpError err = RunEpGenerate(*mpi, eo, &res);
  if (!err.status.ok()) {
    if (err.is_global) {
      if (rank == 0) std::fprintf(stderr, "epserve: error: %s\n", err.status.message().c_str());
      return Status::Unavailable("");  // exit code 1, nothing more to print
    }
    std::fprintf(stderr, "epserve: error: %s\n", err.status.message().c_str());
    std::fflush(stderr);
    mpi->Abort(1);
  }
  if (rank != 0) return Status::Ok();
  std::printf("ranks: %d (machines: %d, DP %d x TP %d), requests per DP group:", res.num_ranks,
              res.num_nodes, res.dp, res.tp);
  for (int b : res.group_batch) std::printf(" %d", b);
  std::printf("\n");
  std::printf("KV cache per DP group: %lld blocks x %lld positions (%s)\n",
              static_cast<long long>(res.cache_blocks), static_cast<long long>(res.block_size),
              f.kv_dtype.c_str());
  if (engine.mtp) PrintMtp(res.draft_tokens, res.accepted_draft_tokens);
  PrintOverlap(eo.engine.overlap, res.split_forwards, res.forwards);
  std::printf("compute: %s, requant: %s\n", ComputeNote(f.compute).c_str(),
              RequantNote(f.requant).c_str());
  RETURN_IF_ERROR(Report(
      f, res.requests, res.vocab,
      {res.prefill_tokens, res.decode_tokens, res.prefill_seconds, res.decode_seconds}, tok));
  if (f.stats) std::printf("\n%s", res.stats_table.c_str());
  if (eo.online) std::printf("\n%s", res.placer_report.c_str());
  return Status::Ok();
}

// Refuses, before any work, an output file that cannot be written or that is also an input or
// another output.
Status CheckOutputs(const GenerateFlags& f) {
  const std::pair<const char*, const std::string*> outputs[] = {
      {"--tokens-out", &f.tokens_out},
      {"--logits-out", &f.logits_out},
      {"--draft-logits-out", &f.draft_logits_out},
      {"--trace-out", &f.trace_out}};
  for (const auto& [flag, path] : outputs) {
    RETURN_IF_ERROR(CheckWritable(flag, *path));
    RETURN_IF_ERROR(CheckNotSameFile(flag, *path, "--arrivals", {f.arrivals}));
    RETURN_IF_ERROR(CheckNotSameFile(flag, *path, "--placement", {f.placement}));
  }
  for (size_t i = 0; i < std::size(outputs); ++i)
    for (size_t j = i + 1; j < std::size(outputs); ++j)
      RETURN_IF_ERROR(CheckNotSameFile(outputs[j].first, *outputs[j].second, outputs[i].first,
                                       {*outputs[i].second}));
  return Status::Ok();
}

// Both errors in one line when both failed (each names its file).
Status Combine(Status first, Status second) {
  if (first.ok()) return second;
  if (second.ok()) return first;
  return Status::IoError(first.message() + "; " + second.message());
}

// The sampling flags not given, from the generation config (as serve does for requests).
Status ApplyGenerationConfig(const std::string& dir, GenerateFlags* f) {
  ASSIGN_OR_RETURN(GenerationConfig g, ReadGenerationConfig(f->generation_config, dir));
  if (g.empty()) return Status::Ok();
  if (!f->temperature_set) f->temperature = g.temperature.value_or(f->temperature);
  if (!f->top_p_set) f->top_p = g.top_p.value_or(f->top_p);
  if (!f->top_k_set) f->top_k = g.top_k.value_or(f->top_k);
  std::printf("sampling: temperature %g, top_p %g, top_k %d (%s; the flags given win)\n",
              f->temperature, f->top_p, f->top_k, g.Source().c_str());
  return Status::Ok();
}

// DeepSeek-V4 (model/v4/) through the same engine: the CPU forward pass, exact compute, f32
// cache; flags for what V4 does not have yet are refused by name.
Status RunV4(const GenerateFlags& f, const std::string& dir,
             const std::vector<GenerateRequest>& reqs, EngineOptions engine, int64_t kv_bytes,
             const text::Tokenizer* tok) {
  const std::string what = dir + " is a DeepSeek-V4 checkpoint: ";
  if (f.device.cuda())
    return Status::InvalidArgument(what + "--device " + f.device.device +
                                   ": the GPU backend does not run V4 yet");
  if (f.tp != 1 || !f.placement.empty())
    return Status::InvalidArgument(what +
                                   "--tp and --placement need several ranks: run under "
                                   "mpirun -np N");
  if (f.stats || !f.trace_out.empty() || f.requant != "none")
    return Status::InvalidArgument(
        what + "--stats, --trace-out and --requant are not implemented for V4 yet");
  ASSIGN_OR_RETURN(std::unique_ptr<v4::V4Weights> weights, v4::V4Weights::Load(dir));
  ThreadPool pool(f.threads > 0 ? f.threads : ThreadPool::DefaultThreads());
  v4::V4Model model(*weights, pool);
  // fp8: the expert inputs rounded as the expert-parallel dispatch rounds them, so this process
  // reproduces an mpirun run bit for bit.
  if (f.expert_input == "fp8") model.SetExpertInput(ExpertInputFormat::kFp8);
  std::printf("model: %s\n", model.Describe().c_str());
  if (f.overlap.mode != "none" && f.overlap.mode != "dispatch")
    return Status::InvalidArgument(what + "--overlap " + f.overlap.mode +
                                   " is not implemented for V4 (none or dispatch: one process "
                                   "has nothing to overlap)");
  engine.overlap = {.mode = Overlap::kNone};
  RETURN_IF_ERROR(
      model.CheckEngineOptions(engine.kv_dtype, engine.mtp, engine.overlap, engine.compute)
          .WithContextOnce(what.substr(0, what.size() - 2)));
  const KvLayout layout = model.CacheLayout(engine.kv_dtype, engine.mtp);
  engine.num_blocks = kv_bytes > 0
                          ? KvMemoryBlocks(layout, engine.kv_dtype, engine.block_size, kv_bytes)
                          : BlocksForAll(reqs, engine.block_size);
  if (engine.num_blocks < 1)
    return Status::InvalidArgument("--kv-memory " + f.kv_memory + " holds not one cache block of " +
                                   std::to_string(engine.block_size) + " positions");
  PrintPool(engine, layout, Longest(reqs));
  Engine eng(model, engine);
  ASSIGN_OR_RETURN(GenerateResult res,
                   RunRequests(eng, reqs, {.keep_logits = !f.logits_out.empty()}));
  const EngineStats& st = res.stats;
  std::printf(
      "engine: %d steps, %lld of %lld prompt tokens from the prefix cache, %lld preemptions\n",
      res.steps, static_cast<long long>(st.cached_prompt_tokens),
      static_cast<long long>(st.prompt_tokens), static_cast<long long>(st.preemptions));
  return Report(f, res.requests, model.vocab_size(),
                {res.prefill_tokens, res.decode_tokens, res.prefill_seconds, res.decode_seconds},
                tok);
}

Status Run(GenerateFlags f) {
  RETURN_IF_ERROR(CheckOutputs(f));
  std::string dir = f.model;
  if (dir.empty()) {
    ASSIGN_OR_RETURN(dir, EnsureDefaultModel());
  }
  if (f.arrivals.empty()) RETURN_IF_ERROR(ApplyGenerationConfig(dir, &f));
  ASSIGN_OR_RETURN(std::unique_ptr<text::Tokenizer> tok, MaybeTokenizer(dir));
  ASSIGN_OR_RETURN(std::vector<GenerateRequest> reqs, BuildRequests(f, dir, tok.get()));
  ASSIGN_OR_RETURN(EngineOptions engine, BuildEngineOptions(f));
  int64_t kv_bytes = 0;
  if (!f.kv_memory.empty()) {
    ASSIGN_OR_RETURN(kv_bytes, ParseKvMemory(f.kv_memory));
  }
  if (f.expert_input != "f32" && f.expert_input != "fp8")
    return Status::InvalidArgument("--expert-input must be f32 or fp8, got " + f.expert_input);
  if (f.a2a != "sparse" && f.a2a != "padded")
    return Status::InvalidArgument("--a2a must be sparse or padded, got " + f.a2a);
  if (comm::LaunchedByMpi() && !f.trace_out.empty())
    return Status::InvalidArgument(
        "--trace-out is recorded by a single process; run without mpirun");
  if (!f.draft_logits_out.empty() && f.mtp != "on")
    return Status::InvalidArgument("--draft-logits-out needs --mtp on");
  if (comm::LaunchedByMpi() && !f.draft_logits_out.empty())
    return Status::InvalidArgument(
        "--draft-logits-out is written by a single process; run without mpirun");
  if (comm::LaunchedByMpi() && f.device.cuda())
    return Status::InvalidArgument("--device " + f.device.device +
                                   ": expert parallelism across GPU ranks is not built yet");
  ASSIGN_OR_RETURN(const ModelFamily family, DetectModelFamily(dir));
  if (family == ModelFamily::kDeepSeekV4) {
    if (!comm::LaunchedByMpi()) return RunV4(f, dir, reqs, engine, kv_bytes, tok.get());
    // Expert parallelism; what V4 does not have there is refused by name (the rest by
    // BuildEpReplica and RunEpGenerate, once, by rank 0).
    const std::string what = dir + " is a DeepSeek-V4 checkpoint: ";
    if (f.stats)
      return Status::InvalidArgument(what + "--stats is not built for V4 under mpirun yet");
    if (f.overlap.mode != "none" && f.overlap.mode != "dispatch")
      return Status::InvalidArgument(what + "--overlap " + f.overlap.mode +
                                     " is not implemented for V4 (none or dispatch)");
    return RunDistributed(f, dir, reqs, engine, kv_bytes, tok.get());
  }
  if (comm::LaunchedByMpi()) return RunDistributed(f, dir, reqs, engine, kv_bytes, tok.get());
  if (f.tp != 1 || f.stats || !f.placement.empty())
    return Status::InvalidArgument(
        "--tp, --placement and --stats need several ranks: run under mpirun -np N");
  if (f.replace.every >= 0)
    std::printf("online re-placement: one process holds every expert, nothing to move\n");
  ASSIGN_OR_RETURN(auto loaded, LoadModel(dir, {.memory = WeightMemory(f),
                                                .requant = RequantFromFlag(f.requant),
                                                .mtp = engine.mtp ? LoadOptions::Mtp::kLoad
                                                                  : LoadOptions::Mtp::kSkip}));
  std::printf("%s\n", DescribeLoad(*loaded, dir).c_str());
  ThreadPool pool(f.threads > 0 ? f.threads : ThreadPool::DefaultThreads());
  Model model(loaded->config, *loaded->weights, pool);
  LocalExperts experts(*loaded->weights, pool,
                       f.expert_input == "fp8" ? ExpertInputFormat::kFp8 : ExpertInputFormat::kF32,
                       loaded->config.ue8m0_scales);
  model.SetExperts(&experts);
  std::unique_ptr<TraceRecorder> recorder;
  if (!f.trace_out.empty()) {
    ASSIGN_OR_RETURN(recorder, TraceRecorder::Open(f.trace_out, loaded->config));
    model.SetRouteObserver([&recorder](const RouteEvent& ev) { recorder->Observe(ev); });
  }
  const ModelConfig& c = loaded->config;
  RETURN_IF_ERROR(CheckMtp(c, engine.mtp).WithContextOnce(dir + "/config.json"));
  std::string note;
  ASSIGN_OR_RETURN(engine.overlap, f.overlap.Options(dir, 1, 1, 1, engine.mtp ? 2 : 1, &note));
  if (!note.empty()) std::printf("%s\n", note.c_str());
  engine.default_stop_ids = c.eos_token_ids;
  if (kv_bytes > 0) {
    engine.num_blocks = KvMemoryBlocks(c, engine.kv_dtype, engine.block_size, kv_bytes, engine.mtp);
    if (engine.num_blocks < 1)
      return Status::InvalidArgument("--kv-memory " + f.kv_memory +
                                     " holds not one cache block of " +
                                     std::to_string(engine.block_size) + " positions");
  } else {
    engine.num_blocks = BlocksForAll(reqs, engine.block_size);
  }
  if (f.device.cuda() && (recorder || f.expert_input != "f32"))
    return Status::InvalidArgument("--device " + f.device.device +
                                   ": --trace-out and --expert-input fp8 are CPU-engine features");
  ASSIGN_OR_RETURN(std::unique_ptr<DeviceParts> device,
                   AttachDevice({.device = f.device.device,
                                 .kv_memory = f.kv_memory,
                                 .mtp = engine.mtp,
                                 .compute_fast = f.compute != "exact",
                                 .requant = f.requant != "none"},
                                *loaded, &model, &engine));
  PrintPool(engine, model.CacheLayout(engine.kv_dtype, engine.mtp), Longest(reqs));
  Engine eng(model, engine);
  ASSIGN_OR_RETURN(GenerateResult res,
                   RunRequests(eng, reqs, {.keep_logits = !f.logits_out.empty()}));
  // A failed trace is reported after the tokens are printed and the other outputs written.
  const Status trace_status = recorder ? recorder->Close() : Status::Ok();
  const EngineStats& st = res.stats;
  std::printf(
      "engine: %d steps, %lld of %lld prompt tokens from the prefix cache, %lld preemptions\n",
      res.steps, static_cast<long long>(st.cached_prompt_tokens),
      static_cast<long long>(st.prompt_tokens), static_cast<long long>(st.preemptions));
  if (engine.mtp) PrintMtp(st.draft_tokens, st.accepted_draft_tokens);
  PrintOverlap(engine.overlap, model.split_forwards(), model.forwards());
  std::printf("compute: %s, requant: %s\n", ComputeNote(f.compute).c_str(),
              RequantNote(f.requant).c_str());
  Status report = Report(
      f, res.requests, c.vocab_size,
      {res.prefill_tokens, res.decode_tokens, res.prefill_seconds, res.decode_seconds}, tok.get());
  return Combine(trace_status, std::move(report));
}

Status Report(const GenerateFlags& f, const std::vector<RequestResult>& results, int vocab,
              const Timing& t, const text::Tokenizer* tok) {
  std::string first_error;  // "sequence 2: <why>", the first request that failed
  int num_errors = 0;
  for (size_t s = 0; s < results.size(); ++s) {
    const RequestResult& r = results[s];
    std::printf("sequence %zu:", s);
    for (int32_t id : r.tokens) std::printf(" %d", id);
    if (r.finish == FinishReason::kError) {
      std::printf(" [error: %s]", r.error.c_str());
      if (num_errors++ == 0) first_error = "sequence " + std::to_string(s) + ": " + r.error;
    } else {
      std::printf(" [%s, %lld prompt tokens cached]", FinishReasonName(r.finish),
                  static_cast<long long>(r.cached_prompt_tokens));
    }
    std::printf("\n");
    if (tok != nullptr && !r.tokens.empty()) {
      // Ids the tokenizer does not define (a random model's vocab may be larger) print as such.
      auto text = tok->Decode(r.tokens, {.skip_special_tokens = true});
      std::printf(
          "text %zu: %s\n", s,
          text.ok() ? nlohmann::json(*text).dump().c_str() : text.status().message().c_str());
    }
  }
  std::printf("prefill: %lld tokens in %.3f s (%.1f tokens/s)\n",
              static_cast<long long>(t.prefill_tokens), t.prefill_seconds,
              t.prefill_tokens / std::max(t.prefill_seconds, 1e-9));
  std::printf("decode: %lld tokens in %.3f s (%.1f tokens/s)\n",
              static_cast<long long>(t.decode_tokens), t.decode_seconds,
              t.decode_tokens / std::max(t.decode_seconds, 1e-9));
  // What was computed is on stdout before any output file is tried; every output is attempted
  // and the errors of all that failed are returned together.
  std::fflush(stdout);
  Status written;
  if (!f.logits_out.empty()) {
    // [requests, max_tokens, vocab]; rows past a request's last token are zero.
    int steps = 0;
    for (const auto& r : results) steps = std::max(steps, static_cast<int>(r.tokens.size()));
    steps = std::max(steps, f.max_tokens);
    std::vector<float> all(results.size() * static_cast<size_t>(steps) * vocab, 0.0f);
    for (size_t s = 0; s < results.size(); ++s)
      std::copy(results[s].logits.begin(), results[s].logits.end(),
                all.begin() + s * static_cast<size_t>(steps) * vocab);
    written =
        Combine(std::move(written),
                WriteNpyF32(f.logits_out, {static_cast<int64_t>(results.size()), steps, vocab},
                            all.data()));
  }
  if (!f.draft_logits_out.empty()) {
    // [drafts, vocab]: sequence by sequence, each in position order (--tokens-out lists the
    // positions).
    std::vector<float> all;
    for (const auto& r : results)
      all.insert(all.end(), r.draft_logits.begin(), r.draft_logits.end());
    written = Combine(std::move(written),
                      WriteNpyF32(f.draft_logits_out,
                                  {static_cast<int64_t>(all.size()) / vocab, vocab}, all.data()));
  }
  if (!f.tokens_out.empty()) {
    std::vector<std::vector<int32_t>> tokens;
    nlohmann::json finish = nlohmann::json::array(), cached = nlohmann::json::array();
    for (const auto& r : results) {
      tokens.push_back(r.tokens);
      finish.push_back(FinishReasonName(r.finish));
      cached.push_back(r.cached_prompt_tokens);
    }
    nlohmann::json j = {{"tokens", tokens}, {"finish", finish}, {"cached_prompt_tokens", cached}};
    if (!f.draft_logits_out.empty()) {
      j["draft_positions"] = nlohmann::json::array();
      for (const auto& r : results) j["draft_positions"].push_back(r.draft_positions);
    }
    const std::string text = j.dump() + "\n";
    written = Combine(std::move(written), WriteFileAtomically(f.tokens_out, text));
  }
  if (num_errors > 0) {
    const std::string more = num_errors > 1 ? " (and " + std::to_string(num_errors - 1) +
                                                  " more requests failed; see above)"
                                            : "";
    return Combine(Status::InvalidArgument(first_error + more), std::move(written));
  }
  return written;
}

}  // namespace

void RegisterGenerateCommand(CLI::App& app, CommandContext& ctx) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate",
                                     "Generate tokens for prompts given as token ids (all at step "
                                     "0) or replayed from an arrivals file, on the\n"
                                     "serving engine (continuous batching, paged latent cache, "
                                     "prefix reuse); prints the ids per sequence, how it\n"
                                     "finished, and prefill/decode throughput. Without --model it "
                                     "uses the embedded default (preset tiny).");
  cmd->add_option("--model", f->model, "checkpoint directory (config.json + safetensors)");
  cmd->add_option("--prompt-ids", f->prompts,
                  "comma-separated token ids; repeat for more sequences");
  cmd->add_option(
      "--prompt", f->text_prompts,
      "prompt text, encoded with the model's tokenizer (BOS added); repeat for more sequences");
  cmd->add_flag("--chat", f->chat,
                "each --prompt is one user message, rendered with the model's chat template");
  cmd->add_option(
      "--arrivals", f->arrivals,
      "replay requests arriving over time: JSON lines of {\"step\": N, \"prompt_ids\": [...], "
      "\"max_tokens\": M} with optional cancel_step, temperature, top_p, top_k, seed, stop_ids, "
      "ignore_eos (docs/serving-engine.md)");
  cmd->add_option("--max-tokens", f->max_tokens, "tokens to generate per sequence (at most)")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", f->ignore_eos, "do not stop at the model's eos_token_id");
  auto* eng = "Engine (docs/serving-engine.md)";
  cmd->add_option("--mtp", f->mtp,
                  "on: speculative decoding with the model's MTP module (each decode verifies one "
                  "drafted token; greedy output is identical, sampled output has the same "
                  "distribution; acceptance is printed)")
      ->check(CLI::IsMember({"on", "off"}))
      ->group(eng)
      ->capture_default_str();
  f->overlap.AddTo(cmd, eng);
  cmd->add_option("--kv-dtype", f->kv_dtype,
                  "f32 | bf16 latent cache rows (bf16 halves the memory)")
      ->group(eng)
      ->capture_default_str();
  AddComputeFlag(cmd, &f->compute)->group(eng);
  AddRequantFlag(cmd, &f->requant)->group(eng);
  f->device.AddTo(cmd)->group(eng);
  cmd->add_option("--kv-memory", f->kv_memory,
                  "bytes for the KV block pool per DP group (e.g. 512M, 2G, or 30% of the memory "
                  "available now; with --device cuda, of the GPU's free memory); default: "
                  "enough for every request at once")
      ->group(eng);
  cmd->add_option("--block-size", f->block_size, "positions per cache block")
      ->check(IntRange(1, 1 << 20))
      ->group(eng)
      ->capture_default_str();
  cmd->add_option("--max-batch-tokens", f->max_batch_tokens,
                  "token budget of one step (decodes + prefill chunks)")
      ->check(AtLeast(1))
      ->group(eng)
      ->capture_default_str();
  cmd->add_option("--max-running", f->max_running, "requests holding cache blocks at once")
      ->check(AtLeast(1))
      ->group(eng)
      ->capture_default_str();
  cmd->add_flag("--no-prefix-cache", f->no_prefix_cache, "never reuse cached prompt prefixes")
      ->group(eng);
  cmd->add_option("--logits-out", f->logits_out,
                  "write float32 logits [sequences, steps, vocab] (.npy); step 0 = last prompt "
                  "position; rows after a "
                  "sequence stopped are zero");
  cmd->add_option("--draft-logits-out", f->draft_logits_out,
                  "with --mtp on: write the MTP module's float32 logits of every draft "
                  "[drafts, vocab] (.npy), sequence by sequence in position order; --tokens-out "
                  "then lists each sequence's \"draft_positions\" (a row at position p predicts "
                  "the token at p + 2)");
  cmd->add_option("--tokens-out", f->tokens_out,
                  "write {\"tokens\": [[...], ...], \"finish\": [...], \"cached_prompt_tokens\": "
                  "[...]} as JSON, in the order of the prompts / arrivals file");
  cmd->add_option("--temperature", f->temperature, "0 = greedy")
      ->check(RealRange(0, 1e4))
      ->capture_default_str();
  cmd->add_option("--top-p", f->top_p, "nucleus sampling mass, in (0, 1]")
      ->check(RealRange(0, 1, LowerEnd::kOpen))
      ->capture_default_str();
  cmd->add_option("--top-k", f->top_k, "sample among the k most likely tokens (0: all)")
      ->check(AtLeast(0))
      ->capture_default_str();
  cmd->add_option("--seed", f->seed, "sampling seed (sequence i uses seed + i)")
      ->capture_default_str();
  cmd->add_option("--generation-config", f->generation_config,
                  "where --temperature, --top-p and --top-k not given come from: auto = the "
                  "model folder's generation_config.json if it has one, none = the defaults "
                  "shown, or the path of such a file (not for --arrivals)")
      ->capture_default_str();
  cmd->add_option("--threads", f->threads, "worker threads (0: all cores)")->check(ThreadCount());
  cmd->add_option(
         "--weights", f->weights,
         "copied: copy the weights this rank streams into anonymous memory on huge pages (fewer "
         "TLB misses; costs their size in RAM); mapped: read them from the checkpoint's file "
         "mapping")
      ->check(CLI::IsMember({"mapped", "copied"}))
      ->capture_default_str();
  cmd->add_option("--expert-input", f->expert_input,
                  "f32 | fp8: fp8 rounds expert inputs through the dispatch format, as an "
                  "expert-parallel run does")
      ->capture_default_str();
  cmd->add_option(
      "--trace-out", f->trace_out,
      "record every token's routing (experts and gate weights per MoE layer) to a trace file "
      "(docs/trace-format.md) for `epserve place`");
  auto* ep = "Expert parallelism (run under mpirun -np N)";
  cmd->add_option("--tp", f->tp,
                  "TP ranks per DP group (DP = N / TP); heads split, experts never duplicated")
      ->check(AtLeast(1))
      ->group(ep)
      ->capture_default_str();
  cmd->add_option("--ranks-per-node", f->ranks_per_node,
                  "emulate machines of K ranks (0: as MPI reports)")
      ->check(AtLeast(0))
      ->group(ep);
  cmd->add_option(
         "--a2a", f->a2a,
         "sparse (counts, then only real rows) | padded (old all-reduce + padded all-to-all)")
      ->group(ep)
      ->capture_default_str();
  cmd->add_option("--placement", f->placement,
                  "expert placement file (docs/placement-format.md); default contiguous")
      ->group(ep);
  cmd->add_flag("--stats", f->stats,
                "print traffic per MoE layer, tokens per rank/expert, time per kernel")
      ->group(ep);
  f->replace.AddTo(cmd, ep);
  cmd->add_option("--timeout", f->timeout, "seconds a rank waits for its peers before giving up")
      ->check(PositiveReal())
      ->group(ep)
      ->capture_default_str();
  cmd->add_option("--fault-kill-rank", f->kill_rank)
      ->group("");  // tests: that rank SIGKILLs itself
  cmd->add_option("--fault-kill-step", f->kill_step)->group("");
  cmd->add_flag("--fault-stop", f->stop_rank)->group("");  // tests: SIGSTOP instead of SIGKILL
  cmd->add_option("--fault-fail-load-rank", f->fail_load_rank)
      ->group("");  // tests: that rank fails to load
  cmd->callback([f, cmd, &ctx] {
    f->temperature_set = cmd->count("--temperature") > 0;
    f->top_p_set = cmd->count("--top-p") > 0;
    f->top_k_set = cmd->count("--top-k") > 0;
    Status st = Run(*f);
    if (st.ok()) return;
    if (st.message().empty())
      ctx.exit_code = 1;
    else
      ReportError(ctx, st.message());
  });
}

}  // namespace epserve::tools
