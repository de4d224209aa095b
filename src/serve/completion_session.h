// One /v1/completions or /v1/chat/completions request from submission to its last byte:
// builds the prompt (chat messages and tools through the model's chat template), submits one
// engine request per choice (n) to the GroupRouter (which picks the DP group), and turns their
// TokenEvents into the OpenAI response, whole (Collect) or as server-sent events (NextSse).
// Chat output is split into reasoning, content and tool calls by ChatOutput
// (docs/serving-api.md, "Tool calls", "Reasoning", "Structured outputs"). Independent of the
// HTTP library. Thread safety: one session per HTTP request, used by one thread at a time; the
// ServeContext must outlive it.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "base/status.h"
#include "runtime/engine_worker.h"
#include "serve/chat_output.h"
#include "serve/group_router.h"
#include "serve/openai_request.h"
#include "serve/output_text.h"
#include "serve/serve_metrics.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace epserve::serve {

struct ServeContext {
  GroupRouter* router = nullptr;
  ServeMetrics* metrics = nullptr;
  const text::Tokenizer* tokenizer = nullptr;
  const text::ChatTemplate* chat_template = nullptr;  // null: /v1/chat/completions is a 400
  std::string model_name;
  int64_t max_model_len = 0;
  // temperature, top_p and top_k of requests that set none (serve --generation-config).
  SamplingDefaults sampling_defaults;
  // A request's bound on n x max_tokens x (1 + top logprobs) (serve --max-output-units; 0:
  // none), the size of its answer: larger ones get 400 (openai_request.h, CheckOutputUnits).
  int64_t max_output_units = kDefaultMaxOutputUnits;
  // How long a request may go without an event before it fails (an engine that stopped).
  std::chrono::milliseconds idle_timeout = std::chrono::seconds(120);
  // How long a request whose group failed waits for a group to take it back (serve
  // --resume-timeout: a restarting engine world), and how often one request may be resumed.
  std::chrono::milliseconds resume_timeout = std::chrono::seconds(600);
  int max_resumes = 5;
  // Whether groups that are down may come back by themselves (serve --np supervising its
  // world, tools/world_supervisor.h): then a request finding no group up waits for one (up to
  // resume_timeout) instead of getting a 503. Unset: they may not.
  std::function<bool()> groups_may_return;
  // Asks the engine world to re-place its experts now (POST /admin/replace-experts; serve --np
  // with --replace-every, docs/expert-parallelism.md): Ok once the world has been asked (the
  // switch follows over its next steps with traffic), or why it cannot be (the world is down or
  // restarting). Empty where the deployment cannot re-place (one process, --engines, --np
  // without --replace-every). Called from any HTTP thread.
  std::function<Status()> replace_experts;
  std::atomic<uint64_t> next_seed{0x5eed};
  std::atomic<int> num_sessions{0};   // CompletionSessions alive (responses not yet sent)
  int max_sessions = 0;               // > 0: more at once get 429
  std::atomic<bool> draining{false};  // shutting down: new requests get 503
  // How the model writes tool calls and reasoning (serve --tool-call-format, --reasoning-parser).
  ToolCallFormat tool_format = ToolCallFormat::kNone;
  enum class Reasoning { kNone, kDeepSeekR1, kDeepSeekV3 } reasoning = Reasoning::kNone;
  // Tests only (serve --scripted-outputs): a chat request whose last message contains `when`
  // gets exactly `output`'s tokens (then EOS) from the engine, whatever the weights say.
  struct ScriptedOutput {
    std::string when, output;
  };
  std::vector<ScriptedOutput> scripted_outputs;
};

class CompletionSession {
 public:
  static std::variant<std::unique_ptr<CompletionSession>, ApiError> Start(ServeContext& ctx,
                                                                          CompletionParams params);
  ~CompletionSession();  // cancels the request if it has not finished

  // Non-streaming: waits for the end and returns the response body, JSON text written as the
  // answer is built (its logprobs as the tokens arrive), so it costs about its own bytes, never
  // a JSON tree of itself. `client_gone`, when given, is asked every 200 ms: once true the
  // request is cancelled (the engine stops generating for nobody) and the error is a 499
  // nobody reads.
  std::variant<std::string, ApiError> CollectText(std::function<bool()> client_gone = {});
  // The same, parsed (the same JSON: nlohmann::json's objects are as sorted as CollectText
  // writes them). Its tree is ~10x the text: HTTP answers should send CollectText's.
  std::variant<nlohmann::json, ApiError> Collect(std::function<bool()> client_gone = {});
  // Streaming: waits up to `wait` for events and appends their SSE chunks ("data: {...}\n\n",
  // the last one "data: [DONE]\n\n") to *out. Returns true once the stream is complete.
  bool NextSse(std::string* out, std::chrono::milliseconds wait);
  // The client went away: the engine drops the request at its next step.
  void Cancel();

 private:
  // One choice: its engine request and what it produced so far.
  struct Choice {
    int index = 0;
    std::shared_ptr<RequestStream> stream = std::make_shared<RequestStream>();
    EngineRequest request;                        // as submitted (a retry submits it again)
    RoutedRequest routed;                         // group and engine id; group -1 before submission
    std::unique_ptr<OutputText> text_out;         // completions
    std::unique_ptr<ChatOutput> chat_out;         // chat
    std::unique_ptr<LogprobsText> logprobs_text;  // whole answers with logprobs
    // Streaming: every event so far (pending_tokens point into it), and the tokens not yet
    // sent with a chunk. Whole answers keep neither (logprobs_text has their logprobs).
    std::deque<TokenEvent> events;
    std::vector<const TokenEvent*> pending_tokens;
    std::vector<int32_t> token_ids;
    std::string text;  // completions: everything given out
    int64_t cached_tokens = 0;
    FinishReason finish = FinishReason::kNone;
    std::string error;
    bool finished = false, sent_role = false, sent_finish = false;
    // Resuming (its group failed): waiting for a group to take it back.
    bool resuming = false, resumed = false;  // resumed: no token since the resume yet
    int resumes = 0;
    std::string failure;  // why its last group failed
    std::chrono::steady_clock::time_point failed_at, resume_deadline, next_try;
    std::chrono::steady_clock::time_point last_event, last_token;
  };
  CompletionSession(ServeContext& ctx, CompletionParams params, std::vector<int32_t> prompt);
  Choice& NewChoice(int index);
  // n > 1: choices 1.. are submitted once choice 0 has its first token (its prompt's blocks are
  // then in the group's prefix cache), to choice 0's group.
  void SubmitOthers();
  // Folds one event into c; *out gets the SSE chunks it makes (streaming) or nothing. Returns
  // false when it ends the choice.
  bool Consume(Choice& c, const TokenEvent& ev, std::string* out);
  // The choice's group failed under it (a retryable error): it runs again on a group that is
  // up, from where it was (the prompt plus its tokens so far, EngineRequest::resumed_tokens),
  // so its client's output goes on after a pause, exactly as it would have for greedy and
  // seeded requests. A restarting world is waited for up to ctx_.resume_timeout (TryResume,
  // from the polling loops). False: it may not be resumed (shutting down, resumed too often).
  bool BeginResume(Choice& c, const std::string& why);
  bool GroupsMayReturn() const;
  void TryResume(Choice& c);
  void CancelChoice(Choice& c);
  nlohmann::json Usage() const;
  nlohmann::json Logprobs(const std::vector<const TokenEvent*>& tokens, size_t text_offset) const;
  nlohmann::json ChunkEnvelope(nlohmann::json choice, bool with_usage) const;
  std::string FinishName(const Choice& c) const;
  nlohmann::json Message(const Choice& c) const;
  void EmitChat(Choice& c, const std::vector<ChatDelta>& deltas, const char* finish,
                std::string* out);
  void EmitText(Choice& c, const std::string& text, const char* finish, std::string* out);

  ServeContext& ctx_;
  CompletionParams params_;
  std::vector<int32_t> prompt_;
  std::vector<std::unique_ptr<Choice>> choices_;
  std::string id_text_;
  int64_t created_ = 0;
  bool sent_done_ = false;
  bool others_submitted_ = true;                   // n > 1: SubmitOthers has run
  int next_poll_ = 0;                              // streaming: the choice polled first
  std::chrono::steady_clock::time_point started_;  // latency metrics
};

}  // namespace epserve::serve
