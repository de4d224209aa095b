#include "serve/completion_session.h"

#include <cstdio>
#include <ctime>
#include <regex>

namespace epserve::serve {

namespace {

using Json = nlohmann::json;

std::string RandomId(const char* prefix, uint64_t salt) {
  static std::atomic<uint64_t> counter{0};
  const uint64_t v = (static_cast<uint64_t>(std::time(nullptr)) << 20) ^
                     (counter++ * 0x9e3779b97f4a7c15ull) ^ salt;
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%s%016llx", prefix, static_cast<unsigned long long>(v));
  return buf;
}

// What a client may read of an error from the engines: their addresses ("group 0
// (10.0.0.2:9000) failed: ...", gRPC's "ipv4:10.0.0.2:9000: ...") are the deployment's business.
// The whole message goes to the log first.
std::string ForClient(const std::string& message) {
  static const std::regex kAddress(
      R"(\s*\((?:ipv[46]:)?[\w.\-\[\]:]+:\d+\)|(?:ipv[46]:)?\b\d{1,3}(?:\.\d{1,3}){3}:\d+:?\s*|\[[0-9a-fA-F:]+\]:\d+:?\s*)");
  const std::string redacted = std::regex_replace(message, kAddress, "");
  if (redacted != message) std::fprintf(stderr, "epserve: request failed: %s\n", message.c_str());
  return redacted;
}

ApiError ServerError(const std::string& message, int status = 500) {
  return ApiError{.http_status = status, .message = message, .type = "server_error"};
}

}  // namespace

std::variant<std::unique_ptr<CompletionSession>, ApiError> CompletionSession::Start(
    ServeContext& ctx, CompletionParams params) {
  if (!params.model.empty() && params.model != ctx.model_name)
    return ApiError{.http_status = 404,
                    .message = "The model '" + params.model + "' does not exist",
                    .param = "model",
                    .code = "model_not_found"};
  std::vector<int32_t> prompt;
  const text::Tokenizer& tok = *ctx.tokenizer;
  if (params.endpoint == Endpoint::kChat) {
    if (ctx.chat_template == nullptr)
      return ApiError{.message = "the model has no chat template", .param = "messages"};
    nlohmann::ordered_json context = {{"messages", params.messages},
                                      {"add_generation_prompt", true},
                                      {"bos_token", tok.bos_token()},
                                      {"eos_token", tok.eos_token()},
                                      {"tools", nullptr}};
    StatusOr<std::string> rendered = ctx.chat_template->Render(context);
    if (!rendered.ok()) {
      // The template's errors begin with where it lives on this server
      // ("/srv/m/tokenizer_config.json: chat_template:3:204: ..."): the log gets the whole
      // message, the client the part after the path.
      const std::string& full = rendered.status().message();
      std::fprintf(stderr, "epserve: chat template error: %s\n", full.c_str());
      const size_t at = full.find("chat_template");
      return ApiError{
          .message = at == std::string::npos ? "the chat template failed" : full.substr(at),
          .param = "messages"};
    }
    StatusOr<std::vector<int32_t>> ids = tok.Encode(*rendered);  // the template emits BOS
    if (!ids.ok()) return ApiError{.message = ids.status().message(), .param = "messages"};
    prompt = std::move(*ids);
  } else if (params.prompt_text) {
    StatusOr<std::vector<int32_t>> ids =
        tok.Encode(*params.prompt_text, {.add_special_tokens = true});
    if (!ids.ok()) return ApiError{.message = ids.status().message(), .param = "prompt"};
    prompt = std::move(*ids);
  } else {
    prompt = params.prompt_ids;
  }
  if (prompt.empty()) return ApiError{.message = "the prompt is empty", .param = "prompt"};
  if (ctx.draining) return ServerError("the server is shutting down", 503);
  if (ctx.max_sessions > 0 && ctx.num_sessions >= ctx.max_sessions)
    return ApiError{.http_status = 429,
                    .message = "too many requests at once (--max-concurrent-requests " +
                               std::to_string(ctx.max_sessions) + "); retry later",
                    .code = "rate_limit_exceeded",
                    .type = "rate_limit_error"};
  std::unique_ptr<CompletionSession> s(
      new CompletionSession(ctx, std::move(params), std::move(prompt)));
  const CompletionParams& p = s->params_;
  EngineRequest req{.prompt = s->prompt_,
                    .sampling = {.temperature = p.temperature,
                                 .top_p = p.top_p,
                                 .top_k = p.top_k,
                                 .seed = p.seed ? *p.seed : ctx.next_seed++},
                    .max_tokens = p.max_tokens,
                    .use_default_stop = !p.ignore_eos,
                    .logprobs = p.logprobs};
  StatusOr<RoutedRequest> routed = ctx.router->Submit(req, s->stream_);
  if (!routed.ok()) {
    if (routed.status().code() == StatusCode::kUnavailable)
      return ServerError(ForClient(routed.status().message()), 503);
    return ApiError{.message = routed.status().message(), .param = "prompt"};
  }
  s->request_ = std::move(req);
  s->routed_ = *routed;
  return s;
}

CompletionSession::CompletionSession(ServeContext& ctx, CompletionParams params,
                                     std::vector<int32_t> prompt)
    : ctx_(ctx),
      params_(std::move(params)),
      prompt_(std::move(prompt)),
      output_(*ctx.tokenizer, params_.stop),
      created_(static_cast<int64_t>(std::time(nullptr))),
      last_event_(std::chrono::steady_clock::now()),
      started_(last_event_) {
  ++ctx_.num_sessions;
  id_text_ = RandomId(params_.endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-",
                      reinterpret_cast<uintptr_t>(this));
}

CompletionSession::~CompletionSession() {
  if (!finished_) Cancel();
  if (routed_.group >= 0)
    ctx_.router->Finished(routed_, finished_ ? finish_ : FinishReason::kCancelled);
  --ctx_.num_sessions;
}

void CompletionSession::Cancel() {
  if (routed_.group >= 0) ctx_.router->Cancel(routed_, FinishReason::kCancelled);
}

bool CompletionSession::Resubmit(const std::string& why) {
  if (retries_ >= ctx_.router->num_groups()) return false;
  ctx_.router->ReportFailure(routed_.group, why);
  auto stream = std::make_shared<RequestStream>();
  StatusOr<RoutedRequest> again = ctx_.router->Submit(request_, stream, routed_.group);
  if (!again.ok()) return false;
  ctx_.router->Finished(routed_, FinishReason::kError);
  routed_ = *again;
  stream_ = std::move(stream);
  ++retries_;
  return true;
}

bool CompletionSession::Consume(const TokenEvent& ev, Piece* piece) {
  if (ev.finish == FinishReason::kError && ev.retryable && token_ids_.empty() && Resubmit(ev.error))
    return true;  // the rest comes from the new group's stream
  const auto now = std::chrono::steady_clock::now();
  auto seconds = [](auto d) { return std::chrono::duration<double>(d).count(); };
  if (ev.token >= 0) {
    if (token_ids_.empty()) {
      cached_tokens_ = ev.cached_prompt_tokens;
      if (ctx_.metrics) ctx_.metrics->ObserveTimeToFirstToken(seconds(now - started_));
    } else if (ctx_.metrics) {
      ctx_.metrics->ObserveInterTokenLatency(seconds(now - last_token_));
    }
    last_token_ = now;
    token_ids_.push_back(ev.token);
    piece->tokens.push_back(&ev);
    piece->text += output_.Add(ev.token);
  }
  if (output_.stopped()) {
    finish_ = FinishReason::kStop;
    // The engine need not generate past the stop string.
    ctx_.router->Cancel(routed_, FinishReason::kStop);
  } else if (ev.finish != FinishReason::kNone) {
    finish_ = ev.finish;
    error_ = ev.error;
    piece->text += output_.Finish();
  } else {
    return true;
  }
  finished_ = true;
  text_ += piece->text;
  if (ctx_.metrics && (finish_ == FinishReason::kStop || finish_ == FinishReason::kLength))
    ctx_.metrics->ObserveEndToEnd(seconds(now - started_));
  return false;
}

std::string CompletionSession::FinishName() const {
  return finish_ == FinishReason::kLength ? "length" : "stop";
}

Json CompletionSession::Usage() const {
  const int64_t n = static_cast<int64_t>(token_ids_.size());
  const int64_t p = static_cast<int64_t>(prompt_.size());
  return {{"prompt_tokens", p},
          {"completion_tokens", n},
          {"total_tokens", p + n},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens_}}}};
}

Json CompletionSession::Logprobs(const std::vector<const TokenEvent*>& tokens,
                                 size_t text_offset) const {
  if (params_.logprobs < 0) return nullptr;
  const text::Tokenizer& tok = *ctx_.tokenizer;
  if (params_.endpoint == Endpoint::kChat) {
    Json content = Json::array();
    for (const TokenEvent* ev : tokens) {
      auto entry = [&](int32_t id, float lp) {
        const std::string t = TokenText(tok, id);
        return Json{{"token", t}, {"logprob", lp}, {"bytes", TokenBytes(tok, id)}};
      };
      Json e = entry(ev->token, ev->logprob);
      e["top_logprobs"] = Json::array();
      for (const auto& [id, lp] : ev->top_logprobs) e["top_logprobs"].push_back(entry(id, lp));
      content.push_back(e);
    }
    return {{"content", content}};
  }
  Json out = {{"tokens", Json::array()},
              {"token_logprobs", Json::array()},
              {"top_logprobs", Json::array()},
              {"text_offset", Json::array()}};
  size_t offset = text_offset;
  for (const TokenEvent* ev : tokens) {
    const std::string t = TokenText(tok, ev->token);
    out["tokens"].push_back(t);
    out["token_logprobs"].push_back(ev->logprob);
    Json top = Json::object();
    for (const auto& [id, lp] : ev->top_logprobs) top[TokenText(tok, id)] = lp;
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(offset);
    offset += t.size();
  }
  return out;
}

std::variant<Json, ApiError> CompletionSession::Collect() {
  Piece all;
  std::vector<TokenEvent> batch;
  while (!finished_) {
    batch.clear();
    if (!stream_->Pop(&batch, std::chrono::milliseconds(200))) {
      if (std::chrono::steady_clock::now() - last_event_ > ctx_.idle_timeout)
        return ServerError("the engine produced nothing for too long", 504);
      continue;
    }
    last_event_ = std::chrono::steady_clock::now();
    for (TokenEvent& ev : batch) {
      events_.push_back(std::move(ev));
      if (!Consume(events_.back(), &all)) break;
    }
  }
  if (finish_ == FinishReason::kError)
    return ServerError("generation failed: " + ForClient(error_));
  if (finish_ == FinishReason::kCancelled) return ServerError("the request was cancelled", 503);
  Json choice = {
      {"index", 0}, {"logprobs", Logprobs(all.tokens, 0)}, {"finish_reason", FinishName()}};
  if (params_.endpoint == Endpoint::kChat) {
    choice["message"] = {{"role", "assistant"}, {"content", text_}};
  } else {
    choice["text"] = text_;
  }
  if (params_.return_token_ids) choice["token_ids"] = token_ids_;
  return Json{
      {"id", id_text_},
      {"object", params_.endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
      {"created", created_},
      {"model", ctx_.model_name},
      {"choices", Json::array({choice})},
      {"usage", Usage()}};
}

Json CompletionSession::Chunk(const Piece& piece, const char* finish) {
  Json choice = {{"index", 0}};
  const size_t offset = text_.size() - piece.text.size();  // text_ already holds the piece
  if (params_.endpoint == Endpoint::kChat) {
    Json delta = Json::object();
    if (!sent_role_) {
      delta["role"] = "assistant";
      sent_role_ = true;
    }
    if (!piece.text.empty() || finish == nullptr) delta["content"] = piece.text;
    choice["delta"] = delta;
  } else {
    choice["text"] = piece.text;
  }
  choice["logprobs"] = Logprobs(piece.tokens, offset);
  choice["finish_reason"] = finish != nullptr ? Json(finish) : Json(nullptr);
  if (params_.return_token_ids) {
    Json ids = Json::array();
    for (const TokenEvent* ev : piece.tokens) ids.push_back(ev->token);
    choice["token_ids"] = ids;
  }
  Json chunk = {
      {"id", id_text_},
      {"object", params_.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
      {"created", created_},
      {"model", ctx_.model_name},
      {"choices", Json::array({choice})}};
  if (params_.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

bool CompletionSession::NextSse(std::string* out, std::chrono::milliseconds wait) {
  auto emit = [out](const Json& j) { *out += "data: " + j.dump() + "\n\n"; };
  if (sent_done_) return true;
  if (params_.endpoint == Endpoint::kChat && !sent_role_) emit(Chunk(Piece{}, nullptr));
  std::vector<TokenEvent> batch;
  if (!stream_->Pop(&batch, wait)) {
    if (std::chrono::steady_clock::now() - last_event_ <= ctx_.idle_timeout) return false;
    finished_ = true;
    finish_ = FinishReason::kError;
    error_ = "the engine produced nothing for too long";
    Cancel();
  }
  if (!batch.empty()) last_event_ = std::chrono::steady_clock::now();
  for (TokenEvent& ev : batch) {
    events_.push_back(std::move(ev));
    Piece piece;
    const bool more = Consume(events_.back(), &piece);
    if (more) {
      text_ += piece.text;
      if (!piece.text.empty() || (params_.logprobs >= 0 && !piece.tokens.empty()) ||
          params_.return_token_ids)
        emit(Chunk(piece, nullptr));
      continue;
    }
    if (finish_ == FinishReason::kError || finish_ == FinishReason::kCancelled) break;
    emit(Chunk(piece, FinishName().c_str()));
    break;
  }
  if (!finished_) return false;
  if (finish_ == FinishReason::kError || finish_ == FinishReason::kCancelled) {
    emit(ServerError(finish_ == FinishReason::kError ? "generation failed: " + ForClient(error_)
                                                     : "the request was cancelled")
             .Body());
  } else if (params_.include_usage) {
    emit({{"id", id_text_},
          {"object",
           params_.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", ctx_.model_name},
          {"choices", Json::array()},
          {"usage", Usage()}});
  }
  *out += "data: [DONE]\n\n";
  sent_done_ = true;
  return true;
}

}  // namespace epserve::serve
