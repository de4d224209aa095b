// `epserve generate`: batched generation from token ids on one process.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/npy.h"
#include "runtime/generator.h"
#include "runtime/loaded_model.h"
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
};

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
  ASSIGN_OR_RETURN(auto loaded, LoadModel(dir, {}));
  ThreadPool pool(f.threads > 0 ? f.threads : ThreadPool::DefaultThreads());
  Model model(loaded->config, *loaded->weights, pool);
  GenerateOptions opt{.max_tokens = f.max_tokens,
                      .sampling = {.temperature = f.temperature, .top_p = f.top_p, .seed = f.seed},
                      .keep_logits = !f.logits_out.empty()};
  ASSIGN_OR_RETURN(GenerateResult res, Generate(model, prompts, opt));
  for (size_t s = 0; s < res.tokens.size(); ++s) {
    std::printf("sequence %zu:", s);
    for (int32_t t : res.tokens[s]) std::printf(" %d", t);
    std::printf("\n");
  }
  std::printf("prefill: %lld tokens in %.3f s (%.1f tokens/s)\n", static_cast<long long>(res.prefill_tokens),
              res.prefill_seconds, res.prefill_tokens / std::max(res.prefill_seconds, 1e-9));
  std::printf("decode: %lld tokens in %.3f s (%.1f tokens/s)\n", static_cast<long long>(res.decode_tokens),
              res.decode_seconds, res.decode_tokens / std::max(res.decode_seconds, 1e-9));
  if (!f.logits_out.empty()) {
    RETURN_IF_ERROR(WriteNpyF32(f.logits_out,
                                {static_cast<int64_t>(prompts.size()), f.max_tokens, loaded->config.vocab_size},
                                res.logits.data()));
  }
  if (!f.tokens_out.empty()) {
    std::ofstream out(f.tokens_out);
    out << nlohmann::json({{"tokens", res.tokens}}).dump() << "\n";
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
  cmd->callback([f, &ctx] {
    Status st = Run(*f);
    if (!st.ok()) ReportError(ctx, st.message());
  });
}

}  // namespace epserve::tools
