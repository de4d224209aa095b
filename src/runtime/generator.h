// Runs a list of requests to completion on an Engine: each request is submitted at its arrival
// step (0: at once), cancelled at its cancel step if it has one, and its tokens, logits and
// finish collected. `epserve generate` (closed batches and --arrivals replays) and the engine
// benchmark use it.
//
// Under expert parallelism every rank calls it with its DP group's requests: the groups agree
// each step (one AllReduceMax over the world) whether anyone still has work, a group with
// nothing to do steps with zero tokens (the MoE collectives need every rank), and the TP ranks
// of a group run the plan their leader (group rank 0) broadcasts. Only leaders hold an engine's
// requests; followers pass an empty list and get an empty result.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "comm/communicator.h"
#include "runtime/engine.h"
#include "runtime/lockstep.h"

namespace epserve {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  int arrival_step = 0;
  int cancel_step = -1;  // cancelled before this step (-1: never)
  SamplingOptions sampling;
  std::vector<int32_t> stop_ids;  // empty: the model's EOS unless ignore_eos
  bool ignore_eos = false;
  uint32_t sequence_id = 0;  // traces and routing keys
};

struct RequestResult {
  std::vector<int32_t> tokens;  // generated ids
  FinishReason finish = FinishReason::kNone;
  std::string error;
  int64_t cached_prompt_tokens = 0;
  std::vector<float> logits;  // [tokens, vocab] with keep_logits
  // With EngineOptions::keep_draft_logits: each draft's position and MTP logits row [vocab].
  std::vector<int64_t> draft_positions;
  std::vector<float> draft_logits;
  int arrival_step = 0, first_token_step = -1, finish_step = -1;
  double arrival_seconds = 0, first_token_seconds = -1, finish_seconds = -1;  // since the run began
};

struct GenerateOptions {
  bool keep_logits = false;
  std::function<void(int step)> on_step;   // called before each step; may be null
  comm::Communicator* world = nullptr;     // all ranks (expert parallelism); null: one process
  comm::Communicator* group = nullptr;     // this DP group's TP ranks; null or size 1: no TP
  StepParticipant* participant = nullptr;  // joins every step's vote (online re-placement)
};

struct GenerateResult {
  std::vector<RequestResult> requests;  // in the order given
  int steps = 0;
  double seconds = 0;
  // Steps that computed prompt tokens count as prefill time, the others as decode time.
  int64_t prefill_tokens = 0, decode_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  int decode_steps = 0;  // steps counted as decode time
  EngineStats stats;
};

// REQUIRES: engine's model is set up for this rank (experts, TP) and, for followers, the
// engine holds no requests.
StatusOr<GenerateResult> RunRequests(Engine& engine, const std::vector<GenerateRequest>& requests,
                                     const GenerateOptions& options);

// Cache blocks of block_size positions that hold every request's prompt and output at once (so
// no request is ever preempted); at least 1. The default pool size of `generate`.
int64_t BlocksForAll(const std::vector<GenerateRequest>& requests, int64_t block_size);

// Parses an arrivals file: JSON lines of {"step": N, "prompt_ids": [...], "max_tokens": M} with
// optional "cancel_step", "temperature", "top_p", "top_k", "seed", "stop_ids", "ignore_eos".
// Errors name the file, line and field.
StatusOr<std::vector<GenerateRequest>> ReadArrivals(const std::string& path,
                                                    int default_max_tokens);

}  // namespace epserve
