// The serving engine of one DP group: requests arrive (Submit) and leave (finish, Cancel) at any
// step; every Step runs one forward pass over a batch the scheduler picked under a token budget
// (continuous batching with chunked prefill) on a paged latent cache with prefix reuse.
//
// A step has three phases, so a distributed driver can put collectives between them:
//   Schedule()  decides the step as plain data (StepPlan: which requests, which tokens, which
//               blocks) - the only phase that touches the scheduler's queues and the block pool's
//               allocation;
//   Execute     runs the plan through the model (ExecutePlan; TP followers run the leader's
//               plan on their own replica of the cache);
//   Complete()  takes the logits, samples, detects finishes and releases blocks.
// Step() does all three in one process. The policy is in docs/serving-engine.md.
// Thread safety: none; one thread drives an engine (the server's engine thread).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "model/model.h"
#include "runtime/kv_block_pool.h"
#include "runtime/logits_processor.h"
#include "runtime/sampler.h"

namespace epserve {

using RequestId = uint64_t;

struct EngineRequest {
  std::vector<int32_t> prompt;
  SamplingOptions sampling;
  // logit_bias, penalties, min_tokens (runtime/logits_processor.h).
  LogitsAdjustments adjust;
  // A token constraint's spec (structured outputs, forced tool calls): made by
  // EngineOptions::constraints at Submit. Empty: none.
  std::string constraint;
  int max_tokens = 16;
  // A resumed request (its group failed mid-stream; serve re-submits it elsewhere): the last
  // `resumed_tokens` tokens of `prompt` are output this request already produced. They count
  // as output for the penalties, the constraint's state and the sampler's draws, so greedy and
  // seeded requests go on exactly as they would have (not with MTP: a draft's draws differ).
  // max_tokens and min_tokens count the tokens still to come.
  int resumed_tokens = 0;
  // Generation stops after any of these ids (it is the last token of the output). Empty
  // with use_default_stop: the model's EOS.
  std::vector<int32_t> stop_ids;
  bool use_default_stop = true;
  int logprobs = -1;  // -1: none; 0: the sampled token's log-probability; N > 0: also the top N
  // Key for traces and expert routing; default: the request id.
  std::optional<uint32_t> sequence_id;
};

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
const char* FinishReasonName(FinishReason reason);  // "stop", "length", "cancelled", "error"

// One output of a step for one request: a sampled token, a finish, or both.
struct TokenEvent {
  RequestId request = 0;
  int32_t token = -1;  // -1: no token (a finish without one: cancelled, error)
  float logprob = 0;   // when requested
  std::vector<std::pair<int32_t, float>> top_logprobs;
  FinishReason finish = FinishReason::kNone;
  std::string error;                 // kError only
  int64_t cached_prompt_tokens = 0;  // on the first token: prompt tokens whose cache was reused
  std::vector<float> logits;         // EngineOptions::keep_logits only: the row the token came from
  // kError from a group that failed (not from the request): another group may run it again,
  // from the start, or resumed after the tokens it produced (EngineRequest::resumed_tokens).
  bool retryable = false;
};

struct EngineOptions {
  int64_t max_batch_tokens = 256;  // token budget of one step (decodes + prefill chunks)
  int max_running = 64;            // requests holding cache blocks at once
  int64_t block_size = 64;         // positions per cache block
  int64_t num_blocks = 0;          // cache pool size (see KvMemoryBlocks)
  KvDType kv_dtype = KvDType::kF32;
  bool prefix_cache = true;
  bool keep_logits = false;  // tests and --logits-out: events carry their logits rows
  // Speculative decoding with the model's MTP module (docs/serving-engine.md, "MTP"): each
  // decode verifies one draft token, so a step yields 1 or 2 tokens per request; greedy output
  // is identical to plain decoding, sampled output has the same distribution. The cache pool
  // then holds the MTP module's latent rows too. REQUIRES: num_nextn_predict_layers >= 1.
  bool mtp = false;
  // With mtp: CompleteDrafts keeps the MTP module's logits row of every draft
  // (TakeDraftLogits), for the reference check of the module's numerics.
  bool keep_draft_logits = false;
  // How MoE layers overlap communication with compute (Model::SetOverlap; the engine sets it on
  // its model). Under expert parallelism every rank's engine must be given the same.
  OverlapOptions overlap;
  // How the model's matmuls multiply (Model::SetCompute; kernels::Compute): exact or the
  // bfloat16 fast path. Under expert parallelism every rank's engine must be given the same.
  kernels::Compute compute = kernels::Compute::kExact;
  std::vector<int32_t> default_stop_ids;
  // Makes the constraints requests ask for (EngineRequest::constraint); unset: a request with
  // one is refused at Submit.
  ConstraintFactory constraints;
  // The cache pool's storage when the model runs on a device (Model::SetBackend): a view of
  // device memory of num_blocks blocks, kv_dtype, block_size. Unset: host memory.
  KvBlocks kv_storage;
};

// One request's share of a step.
struct PlannedChunk {
  RequestId request = 0;
  uint32_t sequence_id = 0;
  int64_t start = 0;            // first position computed
  std::vector<int32_t> tokens;  // tokens at [start, start + size)
  std::vector<int32_t> blocks;  // block table covering [0, start + size)
  bool want_logits = false;     // the chunk reaches the end of the known tokens: sample after it
  int num_logits = 1;           // with want_logits: logits rows of its last tokens (2: a draft)
};

// A step's main pass, or (Engine::ScheduleDrafts) its MTP pass: then each chunk's tokens are
// the tokens after its positions and hidden_rows maps each token to its row of the main
// pass's Model::hidden().
struct StepPlan {
  std::vector<PlannedChunk> chunks;
  std::vector<int64_t> hidden_rows;  // draft plans only
  int64_t num_tokens() const;
  int64_t num_logits() const;
  std::string Serialize() const;
  static StatusOr<StepPlan> Deserialize(const std::string& bytes);
};

// Runs a plan through the model over `kv`; logits receives num_logits() rows.
Status ExecutePlan(ForwardPass& model, const StepPlan& plan, const KvBlocks& kv,
                   std::vector<float>* logits);
// Runs a draft plan through the model's MTP module (Model::ForwardMtp) on the hidden states of
// the model's last Forward; logits receives num_logits() rows.
Status ExecuteDraftPlan(ForwardPass& model, const StepPlan& drafts, const KvBlocks& kv,
                        std::vector<float>* logits);

// One draft's logits row (EngineOptions::keep_draft_logits): the MTP module's output at
// `position`, predicting the token at position + 2.
struct DraftLogits {
  RequestId request = 0;
  int64_t position = 0;
  std::vector<float> logits;
};

struct EngineStats {
  int64_t steps = 0, prompt_tokens = 0, cached_prompt_tokens = 0, computed_tokens = 0,
          generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t peak_blocks_referenced = 0;
  // MTP: draft tokens verified, and how many of them the main model accepted. A decode that
  // verified a draft yielded 1 + accepted tokens.
  int64_t draft_tokens = 0, accepted_draft_tokens = 0;
};

class Engine {
 public:
  // model must outlive the engine. REQUIRES: options.num_blocks > 0.
  Engine(ForwardPass& model, const EngineOptions& options);
  ~Engine();

  // Queues a request. Errors (nothing queued): an empty prompt, token ids outside the
  // vocabulary, max_tokens < 1, a request that could never fit in the cache pool or the
  // model's context.
  StatusOr<RequestId> Submit(EngineRequest request);
  // The same with the request's constraint already made (MakeConstraint, on the request's own
  // thread, so compiling its grammar never runs on the stepping thread); null: made here.
  StatusOr<RequestId> Submit(EngineRequest request, std::unique_ptr<TokenConstraint> constraint);
  // The constraint `request.constraint` asks for (null when none), made by
  // EngineOptions::constraints. Thread-safe: touches no engine state.
  StatusOr<std::unique_ptr<TokenConstraint>> MakeConstraint(const EngineRequest& request) const;
  // Ends a request at the next step with FinishReason::kCancelled; unknown ids are ignored.
  void Cancel(RequestId id);
  bool HasWork() const {
    return !waiting_.empty() || !running_.empty() || !pending_cancel_.empty();
  }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const { return static_cast<int>(running_.size()); }

  StepPlan Schedule();
  // Samples from the plan's logits; returns this step's events (also those of cancellations
  // and of requests ended by an error). REQUIRES: the model's last Forward ran `plan` (this
  // reads Model::non_finite(): a request whose activations went NaN or infinite ends with an
  // error naming the layer, and its cache blocks are not kept for prefix reuse).
  std::vector<TokenEvent> Complete(const StepPlan& plan, const std::vector<float>& logits);
  // With EngineOptions::mtp, after Complete: the MTP pass of the step (every position whose
  // next token is now known; a draft from each request that goes on decoding). Empty without
  // mtp. CompleteDrafts takes its logits and stores the drafts the next Schedule verifies.
  StepPlan ScheduleDrafts();
  void CompleteDrafts(const StepPlan& drafts, const std::vector<float>& logits);
  // The rows kept since the last call (EngineOptions::keep_draft_logits), in draft order.
  std::vector<DraftLogits> TakeDraftLogits() { return std::exchange(draft_logits_, {}); }
  // Schedule + ExecutePlan + Complete (+ ScheduleDrafts + ExecuteDraftPlan + CompleteDrafts).
  StatusOr<std::vector<TokenEvent>> Step();

  const KvBlockPool& pool() const { return pool_; }
  const EngineStats& stats() const { return stats_; }
  const EngineOptions& options() const { return options_; }
  ForwardPass& model() { return model_; }

 private:
  // The request's stop ids: its own, else the model's defaults when it uses them.
  std::vector<int32_t> StopIdsOf(const EngineRequest& r) const;
  struct Sequence;
  bool EnsureBlocks(Sequence& s, int64_t positions);
  void Preempt(Sequence& s);
  void ReleaseBlocks(Sequence& s);
  void Finish(Sequence& s, FinishReason reason, std::string error, std::vector<TokenEvent>* events);
  void CommitFullBlocks(Sequence& s);
  bool TryAdmit(Sequence& s, int64_t budget, PlannedChunk* chunk);
  PlannedChunk MakeChunk(const Sequence& s, int64_t n) const;
  // Sends one sampled token (its event; logprobs from `row`) and returns whether it ends the
  // request (a stop id, max_tokens); the caller finishes it.
  // An error (the constraint refused the token) is kError with *error set.
  FinishReason Emit(Sequence& s, int32_t token, const float* row, std::string* error,
                    std::vector<TokenEvent>* events);
  // The row s draws from: `row` with its logit adjustments and constraint applied; null when
  // they leave no token: with *error set, or with *error empty when the constraint's output is
  // complete (the request ends as "stop").
  const float* Adjusted(Sequence& s, const float* row, std::string* error);
  // MTP: queues the draft pass's chunk for what this step computed of s (token0: the chunk's
  // first token in the main pass).
  void AddDrafts(const Sequence& s, const PlannedChunk& c, int64_t token0, bool want_draft);

  ForwardPass& model_;
  EngineOptions options_;
  KvBlockPool pool_;
  RequestId next_id_ = 1;
  std::unordered_map<RequestId, std::unique_ptr<Sequence>> sequences_;
  std::deque<RequestId> waiting_;   // FIFO; preempted requests go back to the front
  std::vector<RequestId> running_;  // in admission order
  std::vector<RequestId> pending_cancel_;
  std::vector<TokenEvent>
      early_events_;  // cancellations of waiting requests, emitted next Complete
  EngineStats stats_;
  StepPlan pending_drafts_;  // built by Complete for ScheduleDrafts
  std::vector<DraftLogits> draft_logits_;
};

// Blocks of block_size positions that fit in `bytes` for this model and cache dtype.
// "--mtp on: ..." when mtp is asked of a model without an MTP module.
Status CheckMtp(const ModelConfig& config, bool mtp);

// With mtp the blocks also hold the MTP module's layer.
int64_t KvMemoryBlocks(const ModelConfig& config, KvDType dtype, int64_t block_size, int64_t bytes,
                       bool mtp = false);
// The same for any family's cache layout (ForwardPass::CacheLayout).
int64_t KvMemoryBlocks(const KvLayout& layout, KvDType dtype, int64_t block_size, int64_t bytes);

}  // namespace epserve
