// One /v1/completions or /v1/chat/completions request from submission to its last byte:
// builds the prompt (chat messages through the model's chat template), submits it to the
// GroupRouter (which picks the DP group), and turns its TokenEvents into the OpenAI response, whole
// (Collect) or as server-sent events (NextSse). Independent of the HTTP library. Thread safety: one
// session per HTTP request, used by one thread at a time; the ServeContext must outlive it.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "runtime/engine_worker.h"
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
  // How long a request may go without an event before it fails (an engine that stopped).
  std::chrono::milliseconds idle_timeout = std::chrono::seconds(120);
  std::atomic<uint64_t> next_seed{0x5eed};
  std::atomic<int> num_sessions{0};   // CompletionSessions alive (responses not yet sent)
  int max_sessions = 0;               // > 0: more at once get 429
  std::atomic<bool> draining{false};  // shutting down: new requests get 503
};

class CompletionSession {
 public:
  static std::variant<std::unique_ptr<CompletionSession>, ApiError> Start(ServeContext& ctx,
                                                                          CompletionParams params);
  ~CompletionSession();  // cancels the request if it has not finished

  // Non-streaming: waits for the end and returns the response body.
  std::variant<nlohmann::json, ApiError> Collect();
  // Streaming: waits up to `wait` for events and appends their SSE chunks ("data: {...}\n\n",
  // the last one "data: [DONE]\n\n") to *out. Returns true once the stream is complete.
  bool NextSse(std::string* out, std::chrono::milliseconds wait);
  // The client went away: the engine drops the request at its next step.
  void Cancel();

 private:
  CompletionSession(ServeContext& ctx, CompletionParams params, std::vector<int32_t> prompt);
  struct Piece {
    std::string text;
    std::vector<const TokenEvent*> tokens;  // tokens whose logprobs / ids go with the text
  };
  // Folds one event into the output; returns false when it ends the request.
  bool Consume(const TokenEvent& ev, Piece* piece);
  nlohmann::json Usage() const;
  nlohmann::json Logprobs(const std::vector<const TokenEvent*>& tokens, size_t text_offset) const;
  nlohmann::json Chunk(const Piece& piece, const char* finish);
  std::string FinishName() const;
  // The group failed before the request produced a token: run it on another group.
  bool Resubmit(const std::string& why);

  ServeContext& ctx_;
  CompletionParams params_;
  std::vector<int32_t> prompt_;
  std::shared_ptr<RequestStream> stream_ = std::make_shared<RequestStream>();
  EngineRequest request_;  // as submitted (a retry submits it again)
  RoutedRequest routed_;   // group and engine id; group -1 before submission
  OutputText output_;
  std::string id_text_;
  int64_t created_ = 0;
  // Progress.
  std::deque<TokenEvent> events_;  // every event so far (pieces point into it)
  std::vector<int32_t> token_ids_;
  std::string text_;  // everything given out
  int64_t cached_tokens_ = 0;
  FinishReason finish_ = FinishReason::kNone;
  std::string error_;
  bool finished_ = false, sent_role_ = false, sent_done_ = false;
  int retries_ = 0;
  std::chrono::steady_clock::time_point last_event_;
  std::chrono::steady_clock::time_point started_, last_token_;  // latency metrics
};

}  // namespace epserve::serve
