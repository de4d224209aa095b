// `epserve bench engine`: an offered load on the serving engine. N requests arrive as a
// Poisson process at `rate` per second, with prompt and output lengths drawn uniformly from
// ranges and a share of requests opening with a common prefix. They run twice in one process:
//   continuous  one Engine, requests submitted as they arrive (continuous batching, chunked
//               prefill, prefix reuse);
//   static      the old closed batches: requests in arrival order, `static_batch` at a time; a
//               batch starts when its last request has arrived and the previous batch is done,
//               and every sequence of it runs until the batch's longest output is done (its
//               extra tokens are computed and thrown away), no prefix reuse.
// Both measure throughput (tokens/s in and out), time to first token and time per output token
// (percentiles over requests, from each request's arrival), KV pool use and prefix hit rate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model.h"
#include "runtime/engine.h"

namespace epserve {

struct EngineBenchOptions {
  int num_requests = 32;
  double rate = 4.0;  // requests per second (Poisson); 0: all at once
  int prompt_min = 32, prompt_max = 256;
  int output_min = 8, output_max = 64;
  double prefix_share = 0.5;  // share of requests that open with the common prefix
  int prefix_len = 128;
  int static_batch = 8;
  uint64_t seed = 1;
  EngineOptions engine;  // num_blocks 0: enough for max_running requests of the longest length
};

struct LoadSummary {
  std::string mode;
  double seconds = 0;
  int64_t prompt_tokens = 0, output_tokens = 0, computed_tokens = 0, cached_prompt_tokens = 0;
  double tokens_in_per_s = 0, tokens_out_per_s = 0;
  double ttft_p50 = 0, ttft_p90 = 0, ttft_p99 = 0;  // seconds
  double tpot_p50 = 0, tpot_p90 = 0, tpot_p99 = 0;  // seconds per output token after the first
  double peak_pool_use = 0;                         // peak referenced blocks / pool blocks
  double prefix_hit_rate = 0;                       // cached / prompt tokens
  int64_t steps = 0, preemptions = 0;
  int64_t draft_tokens = 0, accepted_draft_tokens = 0;  // EngineOptions::mtp
};

struct EngineBenchResult {
  LoadSummary continuous, stat;
  int64_t pool_blocks = 0, block_size = 0;
};

StatusOr<EngineBenchResult> RunEngineBench(Model& model, const EngineBenchOptions& options);

}  // namespace epserve
