// `epserve bench mtp`: MTP speculative decoding against plain decoding on one checkpoint with an
// MTP module, in one process and one run. For each batch size the same greedy requests (random
// prompts, a fixed number of output tokens, EOS ignored) run on a fresh Engine with --mtp off and
// with --mtp on, the two alternating within each repeat. Reports per batch the decode throughput
// of each (median over repeats), their ratio (the end-to-end decode speed-up), the draft
// acceptance and tokens per decode step, the time of one decode step of each, and whether the
// two runs produced the same tokens (greedy MTP must). A benchmark: it reports, never asserts.
// What the planner predicts for the same model and acceptance is printed beside it by the
// command (tools/cmd_bench_mtp.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "model/model.h"
#include "runtime/engine.h"

namespace epserve {

struct MtpBenchOptions {
  std::vector<int> batches = {1, 4, 16};
  int prompt_len = 32;
  int decode_tokens = 32;  // output tokens per request
  int repeats = 3;
  uint64_t seed = 1;
  EngineOptions engine;  // kv_dtype, block_size, overlap; mtp, num_blocks and budgets are set
};

struct MtpBenchRow {
  int batch = 0;
  // Decode (steps that computed no prompt tokens): output tokens per second over all requests,
  // median over repeats, and the median time of one decode step (its main pass, and with MTP
  // its draft pass).
  double off_tokens_per_s = 0, on_tokens_per_s = 0;
  double off_step_ms = 0, on_step_ms = 0;
  double speedup = 0;                                   // on_tokens_per_s / off_tokens_per_s
  int64_t draft_tokens = 0, accepted_draft_tokens = 0;  // one run with MTP
  double acceptance = 0;                                // accepted / drafts
  double tokens_per_step = 0;  // per request and decode step with MTP: 1 + acceptance
  bool identical = false;      // every run's tokens equal the first MTP-off run's
};

// Fails with CheckMtp's error when the model has no MTP module.
StatusOr<std::vector<MtpBenchRow>> RunMtpBench(Model& model, const MtpBenchOptions& options);

}  // namespace epserve
