// `epserve bench serve`: an HTTP load generator for an OpenAI-compatible server (ours, vLLM,
// SGLang, ...), like vLLM's benchmark_serving.py with its random dataset. It sends streamed
// /v1/completions (random token-id prompts) or /v1/chat/completions (random-word messages) with
// Poisson arrivals and/or a concurrency cap, and measures TTFT, inter-token latency, TPOT and
// end-to-end latency per request, token throughput and the server's prefix-cache share.
// Thread safety: RunLoadGenerator may run on any thread; it starts and joins its own threads
// (one per in-flight request) and calls options.progress from them, one call at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace epserve::serve {

enum class BenchEndpoint { kCompletions, kChat };

// Threads the generator runs when neither --max-concurrency nor the request count caps them.
inline constexpr int kMaxLoadThreads = 256;

struct LoadGeneratorOptions {
  std::string url = "http://127.0.0.1:8000";  // scheme://host:port, optionally a path prefix
  std::string api_key;                        // non-empty: "Authorization: Bearer <key>"
  std::string model;                          // empty: the first id of GET /v1/models
  BenchEndpoint endpoint = BenchEndpoint::kCompletions;
  int num_requests = 100;
  // Poisson arrivals at this mean rate (requests/s); infinity sends all at once.
  double request_rate = std::numeric_limits<double>::infinity();
  int max_concurrency = 0;  // at most this many in flight; 0: up to kMaxLoadThreads
  // Lengths are drawn uniformly from [len * (1 - range_ratio), len * (1 + range_ratio)].
  // Prompts: token ids (completions) or words (chat); the shared prefix comes on top.
  int input_len = 256;
  int output_len = 128;  // sent as max_tokens with ignore_eos, so outputs have this length
  double range_ratio = 0;
  // This share of the requests opens with one of num_prefixes shared prefixes (round robin).
  double shared_prefix_share = 0;
  int shared_prefix_len = 256;
  int num_prefixes = 1;
  uint64_t seed = 0;
  double timeout_s = 120;  // per request, from its send to its last byte
  // Called after each finished request with (finished so far, num_requests).
  std::function<void(int, int)> progress;

  // Errors name the command-line flag (`--request-rate must be > 0`).
  Status Validate() const;
};

// Mean, median and tail of one latency, in milliseconds (0 when there are no samples).
struct LatencyStats {
  double mean_ms = 0, median_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0;
  int64_t count = 0;
};

struct LoadGeneratorResult {
  // What ran.
  std::string url, model;
  BenchEndpoint endpoint = BenchEndpoint::kCompletions;
  double request_rate = 0;
  int max_concurrency = 0;  // --max-concurrency (0: none)
  int num_requests = 0;
  int peak_in_flight = 0;  // the most requests that were in flight at once
  // Outcome.
  double duration_s = 0;  // first send to last response
  int completed = 0, failed = 0;
  std::vector<std::string> errors;  // the first few failures' messages
  // Over completed requests, from each response's usage.
  int64_t input_tokens = 0, output_tokens = 0, cached_tokens = 0;
  double request_throughput = 0;  // completed / duration
  double output_throughput = 0;   // output tokens / duration
  double total_throughput = 0;    // (input + output tokens) / duration
  double prefix_cache_share = 0;  // cached / input tokens
  // TTFT: send to the first chunk with text. ITL: between text chunks (all of them pooled).
  // TPOT: (E2E - TTFT) / (output tokens - 1), per request with >= 2 tokens. E2E: send to end.
  LatencyStats ttft, itl, tpot, e2e;
};

// Finds the model (when options.model is empty) and max_model_len with GET /v1/models, checks
// that the longest prompt plus output fits, then runs the load. An unreachable server, a failing
// /v1/models or bad options are errors; failed requests are counted in the result instead.
StatusOr<LoadGeneratorResult> RunLoadGenerator(const LoadGeneratorOptions& options);

// A vLLM-style table ("============ Serving Benchmark Result ============").
std::string FormatTable(const LoadGeneratorResult& result);

// The result as one JSON object (docs/serving-api.md, "epserve bench serve").
nlohmann::json ToJson(const LoadGeneratorResult& result);

// Latency statistics of samples in seconds; percentiles interpolate linearly between closest
// ranks (numpy's default).
LatencyStats SummarizeLatencies(std::vector<double> seconds);

}  // namespace epserve::serve
