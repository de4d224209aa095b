// `epserve generate`: batched generation from token ids on one process.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/npy.h"
#include "comm/communicator.h"
#include "runtime/ep_runner.h"
#include "runtime/generator.h"
#include "runtime/loaded_model.h"
#include "runtime/trace_recorder.h"
#include "tools/command.h"

namespace epserve::tools {

namespace {

struct GenerateFlags {
  std::string model;
  std::vector<std::string> prompts;
  int max_tokens = 16;
  std::string logits_out, tokens_out;
  float temperature = 0.0f, top_p = 1.0f;
  uint64_t seed = 0;
  int threads = 0;
  std::string expert_input = "f32";
  std::string trace_out;
  std::string weights = "copied";
  // Expert parallelism (under mpirun).
  int tp = 1;
  int ranks_per_node = 0;
  std::string a2a = "sparse";
  std::string placement;
  bool stats = false;
  double timeout = 120.0;
  int kill_rank = -1, kill_step = -1, fail_load_rank = -1;
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
      return Status::InvalidArgument("--prompt-ids #" + std::to_string(idx + 1) + ": \"" + item + "\" is not a token id");
    }
  }
  if (ids.empty()) return Status::InvalidArgument("--prompt-ids #" + std::to_string(idx + 1) + " is empty");
  return ids;
}

struct Timing {
  int64_t prefill_tokens, decode_tokens;
  double prefill_seconds, decode_seconds;
};
Status Report(const GenerateFlags& f, const std::vector<std::vector<int32_t>>& tokens, const std::vector<float>& logits,
              int vocab, const Timing& t);

// Under mpirun: every rank runs its DP group's share; rank 0 prints. Errors every rank sees
// alike are printed once (by rank 0); a rank's own failure is printed by that rank, and the job
// is aborted so no peer waits for it.
Status RunDistributed(const GenerateFlags& f, const std::string& dir, const std::vector<std::vector<int32_t>>& prompts,
                      const GenerateOptions& opt) {
  ASSIGN_OR_RETURN(auto mpi, comm::MpiWorld::Init(nullptr, nullptr, {.timeout_seconds = f.timeout}));
  EpRunOptions eo{.model_dir = dir, .prompts = prompts, .generate = opt, .tp = f.tp, .ranks_per_node = f.ranks_per_node,
                  .a2a = f.a2a == "padded" ? comm::A2aMode::kPadded : comm::A2aMode::kSparse,
                  .placement_path = f.placement, .threads = f.threads, .weights = WeightMemory(f),
                  .kill_rank = f.kill_rank, .kill_step = f.kill_step,
                  .fail_load_rank = f.fail_load_rank};
  EpRunResult res;
  EpError err = RunEpGenerate(*mpi, eo, &res);
  const int rank = mpi->world().rank();
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
  std::printf("ranks: %d (machines: %d, DP %d x TP %d), prompts per DP group:", res.num_ranks, res.num_nodes, res.dp,
              res.tp);
  for (int b : res.group_batch) std::printf(" %d", b);
  std::printf("\n");
  RETURN_IF_ERROR(Report(f, res.tokens, res.logits, res.vocab,
                         {res.prefill_tokens, res.decode_tokens, res.prefill_seconds, res.decode_seconds}));
  if (f.stats) std::printf("\n%s", res.stats_table.c_str());
  return Status::Ok();
}

Status Run(const GenerateFlags& f) {
  std::string dir = f.model;
  if (dir.empty()) {
    ASSIGN_OR_RETURN(dir, EnsureDefaultModel());
  }
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < f.prompts.size(); ++i) {
    ASSIGN_OR_RETURN(auto ids, ParseIds(f.prompts[i], i));
    prompts.push_back(std::move(ids));
  }
  GenerateOptions opt{.max_tokens = f.max_tokens,
                      .sampling = {.temperature = f.temperature, .top_p = f.top_p, .seed = f.seed},
                      .keep_logits = !f.logits_out.empty()};
  if (f.expert_input != "f32" && f.expert_input != "fp8")
    return Status::InvalidArgument("--expert-input must be f32 or fp8, got " + f.expert_input);
  if (f.a2a != "sparse" && f.a2a != "padded") return Status::InvalidArgument("--a2a must be sparse or padded, got " + f.a2a);
  if (comm::LaunchedByMpi() && !f.trace_out.empty())
    return Status::InvalidArgument("--trace-out is recorded by a single process; run without mpirun");
  if (comm::LaunchedByMpi()) return RunDistributed(f, dir, prompts, opt);
  if (f.tp != 1 || f.stats || !f.placement.empty())
    return Status::InvalidArgument("--tp, --placement and --stats need several ranks: run under mpirun -np N");
  ASSIGN_OR_RETURN(auto loaded, LoadModel(dir, {.memory = WeightMemory(f)}));
  ThreadPool pool(f.threads > 0 ? f.threads : ThreadPool::DefaultThreads());
  Model model(loaded->config, *loaded->weights, pool);
  LocalExperts experts(*loaded->weights, pool,
                       f.expert_input == "fp8" ? ExpertInputFormat::kFp8 : ExpertInputFormat::kF32);
  model.SetExperts(&experts);
  std::unique_ptr<TraceRecorder> recorder;
  if (!f.trace_out.empty()) {
    ASSIGN_OR_RETURN(recorder, TraceRecorder::Open(f.trace_out, loaded->config));
    model.SetRouteObserver([&recorder](const RouteEvent& ev) { recorder->Observe(ev); });
  }
  ASSIGN_OR_RETURN(GenerateResult res, Generate(model, prompts, opt));
  if (recorder) RETURN_IF_ERROR(recorder->Close());
  return Report(f, res.tokens, res.logits, loaded->config.vocab_size,
                {res.prefill_tokens, res.decode_tokens, res.prefill_seconds, res.decode_seconds});
}

Status Report(const GenerateFlags& f, const std::vector<std::vector<int32_t>>& tokens, const std::vector<float>& logits,
              int vocab, const Timing& t) {
  for (size_t s = 0; s < tokens.size(); ++s) {
    std::printf("sequence %zu:", s);
    for (int32_t id : tokens[s]) std::printf(" %d", id);
    std::printf("\n");
  }
  std::printf("prefill: %lld tokens in %.3f s (%.1f tokens/s)\n", static_cast<long long>(t.prefill_tokens),
              t.prefill_seconds, t.prefill_tokens / std::max(t.prefill_seconds, 1e-9));
  std::printf("decode: %lld tokens in %.3f s (%.1f tokens/s)\n", static_cast<long long>(t.decode_tokens),
              t.decode_seconds, t.decode_tokens / std::max(t.decode_seconds, 1e-9));
  if (!f.logits_out.empty()) {
    RETURN_IF_ERROR(WriteNpyF32(f.logits_out, {static_cast<int64_t>(tokens.size()), f.max_tokens, vocab}, logits.data()));
  }
  if (!f.tokens_out.empty()) {
    std::ofstream out(f.tokens_out);
    out << nlohmann::json({{"tokens", tokens}}).dump() << "\n";
    if (!out) return Status::IoError(f.tokens_out + ": write failed");
  }
  return Status::Ok();
}

}  // namespace

void RegisterGenerateCommand(CLI::App& app, CommandContext& ctx) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Generate tokens for a batch of prompts given as token ids; prints the ids per sequence and\n"
      "prefill/decode throughput. Without --model it uses the embedded default (preset tiny).");
  cmd->add_option("--model", f->model, "checkpoint directory (config.json + safetensors)");
  cmd->add_option("--prompt-ids", f->prompts, "comma-separated token ids; repeat for more sequences")->required();
  cmd->add_option("--max-tokens", f->max_tokens, "tokens to generate per sequence")->capture_default_str();
  cmd->add_option("--logits-out", f->logits_out,
                  "write float32 logits [sequences, steps, vocab] (.npy); step 0 = last prompt position");
  cmd->add_option("--tokens-out", f->tokens_out, "write {\"tokens\": [[...], ...]} as JSON");
  cmd->add_option("--temperature", f->temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-p", f->top_p, "nucleus sampling mass")->capture_default_str();
  cmd->add_option("--seed", f->seed, "sampling seed (sequence i uses seed + i)")->capture_default_str();
  cmd->add_option("--threads", f->threads, "worker threads (0: all cores)");
  cmd->add_option("--weights", f->weights,
                  "copied: copy the weights this rank streams into anonymous memory on huge pages (fewer "
                  "TLB misses; costs their size in RAM); mapped: read them from the checkpoint's file mapping")
      ->check(CLI::IsMember({"mapped", "copied"}))
      ->capture_default_str();
  cmd->add_option("--expert-input", f->expert_input,
                  "f32 | fp8: fp8 rounds expert inputs through the dispatch format, as an expert-parallel run does")
      ->capture_default_str();
  cmd->add_option("--trace-out", f->trace_out,
                  "record every token's routing (experts and gate weights per MoE layer) to a trace file "
                  "(docs/trace-format.md) for `epserve place`");
  auto* ep = "Expert parallelism (run under mpirun -np N)";
  cmd->add_option("--tp", f->tp, "TP ranks per DP group (DP = N / TP); heads split, experts never duplicated")
      ->group(ep)->capture_default_str();
  cmd->add_option("--ranks-per-node", f->ranks_per_node, "emulate machines of K ranks (0: as MPI reports)")->group(ep);
  cmd->add_option("--a2a", f->a2a, "sparse (counts, then only real rows) | padded (old all-reduce + padded all-to-all)")
      ->group(ep)->capture_default_str();
  cmd->add_option("--placement", f->placement, "expert placement file (docs/placement-format.md); default contiguous")->group(ep);
  cmd->add_flag("--stats", f->stats, "print traffic per MoE layer, tokens per rank/expert, time per kernel")->group(ep);
  cmd->add_option("--timeout", f->timeout, "seconds a rank waits for its peers before giving up")->group(ep)->capture_default_str();
  cmd->add_option("--fault-kill-rank", f->kill_rank)->group("");  // tests: that rank SIGKILLs itself
  cmd->add_option("--fault-kill-step", f->kill_step)->group("");
  cmd->add_option("--fault-fail-load-rank", f->fail_load_rank)->group("");  // tests: that rank fails to load
  cmd->callback([f, &ctx] {
    Status st = Run(*f);
    if (st.ok()) return;
    if (st.message().empty()) ctx.exit_code = 1;
    else ReportError(ctx, st.message());
  });
}

}  // namespace epserve::tools
