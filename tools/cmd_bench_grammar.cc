// `epserve bench grammar`: the grammar engine (src/grammar, docs/grammar.md) on the real
// DeepSeek-V3 vocabulary: vocabulary/trie build time, schema compile time, and the per-token
// cost of FillMask (cache hits and misses apart), FillClosingMask and AcceptToken over random
// outputs generated within the masks (grammar/sampling.h), one thread.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "base/percentile.h"
#include "grammar/grammar.h"
#include "grammar/sampling.h"
#include "runtime/constrained_bench.h"
#include "runtime/loaded_model.h"
#include "text/tokenizer.h"
#include "tools/command.h"
#include "tools/flag_checks.h"

namespace epserve::tools {

namespace {

struct BenchGrammarFlags {
  std::string tokenizer;
  std::string schema = std::string(EPSERVE_SOURCE_DIR) + "/tests/grammar/schemas.json";
  int64_t tokens = 50000;
  int max_tokens = 400;
  int model_vocab = 129280;
  std::string whitespace = "single";
  bool json = false;
  // Engine decode steps with and without constraints (runtime/constrained_bench.h).
  std::string model;
  int batch = 8, engine_tokens = 128, rounds = 3, threads = 0;
};

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Summary {
  size_t count = 0;
  double p50 = 0, p99 = 0, max = 0, mean = 0;
};

Summary Summarize(const std::vector<double>& v) {
  Summary s;
  s.count = v.size();
  if (v.empty()) return s;
  s.p50 = Percentile(v, 0.5);
  s.p99 = Percentile(v, 0.99);
  s.max = *std::max_element(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  return s;
}

nlohmann::ordered_json ToJson(const Summary& s) {
  return {{"count", s.count},
          {"p50_us", s.p50},
          {"p99_us", s.p99},
          {"max_us", s.max},
          {"mean_us", s.mean}};
}

// The same schemas in the engine: decode steps of --batch sampled requests on --model, with and
// without their constraint, rounds alternating.
StatusOr<nlohmann::ordered_json> EngineSteps(const BenchGrammarFlags& f,
                                             const std::vector<nlohmann::ordered_json>& schemas) {
  ASSIGN_OR_RETURN(auto loaded, LoadModel(f.model, {}));
  ASSIGN_OR_RETURN(std::unique_ptr<text::Tokenizer> tok, text::Tokenizer::Load(f.model));
  ThreadPool pool(f.threads > 0 ? f.threads : ThreadPool::DefaultThreads());
  Model model(loaded->config, *loaded->weights, pool);
  ConstrainedBenchOptions o{.batch = f.batch, .max_tokens = f.engine_tokens, .rounds = f.rounds};
  for (const auto& sc : schemas) o.schemas.push_back(sc.dump());
  ASSIGN_OR_RETURN(
      ConstrainedBenchResult r,
      RunConstrainedBench(model, std::shared_ptr<const text::Tokenizer>(std::move(tok)), o));
  auto mode = [](int64_t steps, int64_t tokens, double step_s, double token_s) {
    return nlohmann::ordered_json{{"steps", steps},
                                  {"tokens", tokens},
                                  {"step_ms", step_s * 1e3},
                                  {"token_us", token_s * 1e6}};
  };
  nlohmann::ordered_json j;
  j["model"] = f.model;
  j["vocab_size"] = loaded->config.vocab_size;
  j["batch"] = f.batch;
  j["tokens_per_request"] = f.engine_tokens;
  j["rounds"] = f.rounds;
  j["free"] = mode(r.free_steps, r.free_tokens, r.free_step_s, r.free_token_s);
  j["constrained"] =
      mode(r.constrained_steps, r.constrained_tokens, r.constrained_step_s, r.constrained_token_s);
  j["token_overhead_pct"] =
      r.free_token_s > 0 ? 100.0 * (r.constrained_token_s / r.free_token_s - 1) : 0.0;
  return j;
}

Status RunBenchGrammar(const BenchGrammarFlags& flags) {
  BenchGrammarFlags f = flags;
  if (f.tokenizer.empty()) f.tokenizer = DefaultReferenceTokenizerDir();
  if (f.tokenizer.empty()) {
    return Status::NotFound(
        "--tokenizer DIR is required (the default, DeepSeek-V3's tokenizer from "
        "tests/text/node_modules, is missing: run `npm ci --prefix tests/text`)");
  }
  ASSIGN_OR_RETURN(auto tok, text::Tokenizer::Load(f.tokenizer));
  auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(auto vocab,
                   grammar::TokenVocab::FromTokenizer(*tok, {tok->eos_id()}, f.model_vocab));
  const double vocab_s = Seconds(t0);

  std::ifstream in(f.schema);
  if (!in) return Status::NotFound(f.schema + ": cannot open (--schema)");
  const nlohmann::ordered_json file = nlohmann::ordered_json::parse(in, nullptr, false);
  if (file.is_discarded()) return Status::InvalidArgument(f.schema + ": invalid JSON");
  // A list of {"name", "schema"} (tests/grammar/schemas.json) or one schema.
  std::vector<nlohmann::ordered_json> schemas;
  if (file.is_array()) {
    for (const auto& e : file) schemas.push_back(e.contains("schema") ? e.at("schema") : e);
  } else {
    schemas.push_back(file);
  }
  grammar::SchemaOptions options;
  if (f.whitespace == "none") options.whitespace = grammar::Whitespace::kNone;
  if (f.whitespace == "pretty") options.whitespace = grammar::Whitespace::kPretty;
  std::vector<std::shared_ptr<const grammar::Grammar>> grammars;
  std::vector<double> compile_ms;
  for (size_t i = 0; i < schemas.size(); ++i) {
    t0 = std::chrono::steady_clock::now();
    grammar::GrammarBuilder b;  // not CompileJsonSchema: its cache would hide repeat compiles
    auto root = b.JsonSchema(schemas[i], options);
    if (!root.ok()) return root.status().WithContext(f.schema + ": schema " + std::to_string(i));
    ASSIGN_OR_RETURN(auto g, b.Build(*root));
    compile_ms.push_back(Seconds(t0) * 1e3);
    grammars.push_back(std::move(g));
  }

  std::vector<double> hit_us, miss_us, closing_us, accept_us, all_us;
  int64_t tokens = 0, outputs = 0, incomplete = 0, hits = 0, misses = 0;
  std::mt19937_64 rng(2024);
  t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; tokens < f.tokens; i = (i + 1) % grammars.size()) {
    grammar::SampleResult r =
        grammar::SampleRandom(grammars[i], vocab, {.max_tokens = f.max_tokens}, &rng);
    ++outputs;
    incomplete += r.complete ? 0 : 1;
    tokens += static_cast<int64_t>(r.ids.size());
    hits += r.cache_hits;
    misses += r.cache_misses;
    for (size_t k = 0; k < r.mask_us.size(); ++k) {
      all_us.push_back(r.mask_us[k]);
      if (r.step_closing[k]) {
        closing_us.push_back(r.mask_us[k]);
      } else {
        (r.step_hit[k] ? hit_us : miss_us).push_back(r.mask_us[k]);
      }
    }
    accept_us.insert(accept_us.end(), r.accept_us.begin(), r.accept_us.end());
  }
  const double gen_s = Seconds(t0);
  const Summary all = Summarize(all_us), hit = Summarize(hit_us), miss = Summarize(miss_us),
                closing = Summarize(closing_us), accept = Summarize(accept_us),
                compile = Summarize(compile_ms);
  const double hit_rate = 100.0 * static_cast<double>(hits) / std::max<int64_t>(1, hits + misses);
  nlohmann::ordered_json engine;
  if (!f.model.empty()) {
    ASSIGN_OR_RETURN(engine, EngineSteps(f, schemas));
  }
  if (f.json) {
    nlohmann::ordered_json j;
    j["tokenizer"] = f.tokenizer;
    j["vocab_size"] = vocab->size();
    j["trie_nodes"] = vocab->trie().size();
    j["vocab_build_s"] = vocab_s;
    j["schemas"] = schemas.size();
    j["whitespace"] = f.whitespace;
    j["compile_ms"] = {{"mean", compile.mean}, {"p50", compile.p50}, {"max", compile.max}};
    j["outputs"] = outputs;
    j["incomplete_outputs"] = incomplete;
    j["tokens"] = tokens;
    j["seconds"] = gen_s;
    j["mask"] = ToJson(all);
    j["mask_cache_hit"] = ToJson(hit);
    j["mask_cache_miss"] = ToJson(miss);
    j["closing_mask"] = ToJson(closing);
    j["accept_token"] = ToJson(accept);
    j["cache_hit_rate_pct"] = hit_rate;
    if (!engine.is_null()) j["engine"] = engine;
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  std::printf("tokenizer: %s\nvocabulary: %d ids (%zu trie nodes), built in %.3f s\n",
              f.tokenizer.c_str(), vocab->size(), vocab->trie().size(), vocab_s);
  std::printf(
      "schemas: %zu from %s (whitespace %s), compiled in %.3f ms mean, %.3f ms p50, "
      "%.3f ms max\n",
      schemas.size(), f.schema.c_str(), f.whitespace.c_str(), compile.mean, compile.p50,
      compile.max);
  std::printf(
      "generated: %lld tokens in %lld outputs (%lld incomplete) in %.2f s, one thread, "
      "random tokens within the masks, %d-token budget\n",
      static_cast<long long>(tokens), static_cast<long long>(outputs),
      static_cast<long long>(incomplete), gen_s, f.max_tokens);
  std::printf("%-22s %9s %10s %10s %10s %10s\n", "per token", "count", "p50 us", "p99 us", "max us",
              "mean us");
  const std::pair<const char*, Summary> rows[] = {{"FillMask (all)", all},
                                                  {"  cache hit", hit},
                                                  {"  cache miss", miss},
                                                  {"FillClosingMask", closing},
                                                  {"AcceptToken", accept}};
  for (const auto& [name, s] : rows) {
    std::printf("%-22s %9zu %10.1f %10.1f %10.1f %10.1f\n", name, s.count, s.p50, s.p99, s.max,
                s.mean);
  }
  std::printf("mask cache hit rate: %.1f%%\n", hit_rate);
  if (!engine.is_null()) {
    std::printf(
        "engine decode steps (%s, vocab %d, batch %d, %d tokens each, %d rounds, "
        "temperature 1):\n",
        f.model.c_str(), engine["vocab_size"].get<int>(), f.batch, f.engine_tokens, f.rounds);
    for (const char* name : {"free", "constrained"}) {
      const auto& m = engine[name];
      std::printf("  %-12s %6lld steps %8lld tokens %9.3f ms/step %9.1f us/token\n", name,
                  static_cast<long long>(m["steps"].get<int64_t>()),
                  static_cast<long long>(m["tokens"].get<int64_t>()), m["step_ms"].get<double>(),
                  m["token_us"].get<double>());
    }
    std::printf("  constraint overhead per token: %+.1f%%\n",
                engine["token_overhead_pct"].get<double>());
  }
  return Status::Ok();
}

}  // namespace

void AddBenchGrammarCommand(CLI::App* bench, CommandContext& ctx) {
  auto f = std::make_shared<BenchGrammarFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "grammar",
      "Structured-output grammar engine on DeepSeek-V3's vocabulary: vocabulary and compile\n"
      "time, per-token FillMask / FillClosingMask / AcceptToken time over random outputs.");
  cmd->add_option("--tokenizer", f->tokenizer,
                  "folder with tokenizer.json (default: DeepSeek-V3's from tests/text)");
  cmd->add_option("--schema", f->schema, "a JSON Schema file, or a list of {\"name\", \"schema\"}")
      ->capture_default_str();
  cmd->add_option("--tokens", f->tokens, "tokens to generate in all")
      ->check(IntRange(1, 100000000))
      ->capture_default_str();
  cmd->add_option("--max-tokens", f->max_tokens, "token budget of each output")
      ->check(IntRange(2, 1000000))
      ->capture_default_str();
  cmd->add_option("--model-vocab", f->model_vocab,
                  "mask width: the model's logits (padded past the tokenizer's ids)")
      ->check(IntRange(1, 100000000))
      ->capture_default_str();
  cmd->add_option("--whitespace", f->whitespace, "whitespace policy of the JSON grammars")
      ->check(CLI::IsMember({"single", "none", "pretty"}))
      ->capture_default_str();
  cmd->add_flag("--json", f->json, "print one JSON object instead of the table");
  cmd->add_option("--model", f->model,
                  "also time engine decode steps with and without the constraints on this model "
                  "(its tokenizer must be its vocabulary: make-model --tokenizer DIR)")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--batch", f->batch, "--model: requests decoding together")
      ->check(IntRange(1, 1024))
      ->capture_default_str();
  cmd->add_option("--engine-tokens", f->engine_tokens, "--model: tokens per request")
      ->check(IntRange(2, 100000))
      ->capture_default_str();
  cmd->add_option("--rounds", f->rounds, "--model: rounds, each running both modes")
      ->check(IntRange(1, 100))
      ->capture_default_str();
  cmd->add_option("--threads", f->threads, "--model: compute threads (0: all cores)")
      ->check(IntRange(0, 4096));
  cmd->callback([f, &ctx] {
    Status st = RunBenchGrammar(*f);
    if (!st.ok()) ReportError(ctx, st.message());
  });
}

}  // namespace epserve::tools
