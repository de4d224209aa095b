// `epserve bench serve`: load on a running OpenAI-compatible server over HTTP
// (serve/load_generator.h), printed as a vLLM-style table and optionally written as JSON.
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "serve/load_generator.h"
#include "tools/command.h"

namespace epserve::tools {

namespace {

struct BenchServeFlags {
  serve::LoadGeneratorOptions load;
  std::string endpoint = "completions";
  std::string request_rate = "inf";
  std::string json;  // a file; "-": stdout instead of the table
};

StatusOr<double> ParseRate(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno != 0 || !(v > 0))
    return Status::InvalidArgument("--request-rate must be > 0 requests/s or inf, got \"" + text +
                                   "\"");
  return v;
}

Status Run(const BenchServeFlags& f) {
  serve::LoadGeneratorOptions o = f.load;
  ASSIGN_OR_RETURN(o.request_rate, ParseRate(f.request_rate));
  o.endpoint =
      f.endpoint == "chat" ? serve::BenchEndpoint::kChat : serve::BenchEndpoint::kCompletions;
  if (o.api_key.empty()) {
    const char* env = std::getenv("EPSERVE_API_KEY");
    if (env != nullptr) o.api_key = env;
  }
  RETURN_IF_ERROR(o.Validate());
  // Progress on stderr at every tenth of the requests.
  const auto start = std::chrono::steady_clock::now();
  int last_tenth = 0;
  o.progress = [start, &last_tenth](int done, int total) {
    const int tenth = done * 10 / total;
    if (tenth == last_tenth) return;
    last_tenth = tenth;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "bench serve: %d/%d requests finished (%d%%) after %.1f s\n", done, total,
                 100 * done / total, s);
  };
  ASSIGN_OR_RETURN(const serve::LoadGeneratorResult r, serve::RunLoadGenerator(o));
  const std::string json = serve::ToJson(r).dump(2) + "\n";
  if (f.json == "-") {
    std::fputs(json.c_str(), stdout);
  } else {
    std::fputs(serve::FormatTable(r).c_str(), stdout);
    if (!f.json.empty()) {
      std::ofstream out(f.json);
      out << json;
      if (!out.flush()) return Status::IoError("--json: cannot write " + f.json);
    }
  }
  std::fflush(stdout);
  if (r.completed == 0)
    return Status::Unavailable("no request completed" +
                               (r.errors.empty() ? std::string() : "; " + r.errors.front()));
  return Status::Ok();
}

}  // namespace

void AddBenchServeCommand(CLI::App* bench, CommandContext& ctx) {
  auto f = std::make_shared<BenchServeFlags>();
  serve::LoadGeneratorOptions& o = f->load;
  CLI::App* cmd = bench->add_subcommand(
      "serve",
      "Load on a running OpenAI-compatible server (epserve serve, vLLM, SGLang, ...) over HTTP,\n"
      "like vLLM's benchmark_serving.py with its random dataset: streamed requests with random\n"
      "prompts (token ids from [100, 1000) for completions, random words for chat) and outputs of\n"
      "a set length (max_tokens with ignore_eos), Poisson arrivals and/or a concurrency cap.\n"
      "Prints throughput, TTFT / TPOT / ITL / end-to-end latency (mean, median, p90, p99) and\n"
      "the share of prompt tokens the server's prefix cache served (docs/serving-api.md).");
  cmd->add_option("--url", o.url, "the server's base URL, http://HOST:PORT (a trailing /v1 is ok)")
      ->capture_default_str();
  cmd->add_option("--api-key", o.api_key,
                  "sent as \"Authorization: Bearer KEY\" (default: $EPSERVE_API_KEY)");
  cmd->add_option("--model", o.model, "the \"model\" sent (default: the first of GET /v1/models)");
  cmd->add_option("--endpoint", f->endpoint,
                  "completions: /v1/completions with token-id prompts; chat: /v1/chat/completions "
                  "with one user message of random words")
      ->check(CLI::IsMember({"completions", "chat"}))
      ->capture_default_str();
  cmd->add_option("--num-requests", o.num_requests, "requests sent in all")->capture_default_str();
  cmd->add_option("--request-rate", f->request_rate,
                  "mean arrivals per second, Poisson (seeded); inf: all at once")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", o.max_concurrency,
                  "at most this many requests in flight (0: up to 256); with --request-rate, an "
                  "arrival waits for a free slot")
      ->capture_default_str();
  cmd->add_option("--input-len", o.input_len,
                  "prompt tokens (chat: words) per request, before any shared prefix")
      ->capture_default_str();
  cmd->add_option("--output-len", o.output_len,
                  "output tokens per request (max_tokens, with ignore_eos)")
      ->capture_default_str();
  cmd->add_option("--range-ratio", o.range_ratio,
                  "input and output lengths are uniform in [len * (1 - r), len * (1 + r)]")
      ->capture_default_str();
  cmd->add_option("--shared-prefix-share", o.shared_prefix_share,
                  "share of requests whose prompt opens with one of --num-prefixes shared "
                  "prefixes (exercises the prefix cache)")
      ->capture_default_str();
  cmd->add_option("--shared-prefix-len", o.shared_prefix_len,
                  "tokens (chat: words) of each shared prefix, on top of --input-len")
      ->capture_default_str();
  cmd->add_option("--num-prefixes", o.num_prefixes, "distinct shared prefixes, used round robin")
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "seed of the prompts, lengths and arrival times")
      ->capture_default_str();
  cmd->add_option("--timeout", o.timeout_s,
                  "seconds one request may take from its send to its last byte (connecting: at "
                  "most 10 s)")
      ->capture_default_str();
  cmd->add_option("--json", f->json, "also write the result as JSON to FILE (-: print only JSON)");
  cmd->callback([f, &ctx] {
    Status st = Run(*f);
    if (!st.ok()) ReportError(ctx, st.message());
  });
}

}  // namespace epserve::tools
