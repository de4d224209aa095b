#include "serve/completion_session.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <limits>
#include <regex>
#include <thread>

#include "serve/chat_prompt.h"

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
  // Before the prompt is built: a refused answer costs nothing.
  if (params.max_tokens_set)
    if (auto e = CheckOutputUnits(params, ctx.max_output_units)) return *e;
  auto built = BuildPrompt(ctx, params);
  if (auto* e = std::get_if<ApiError>(&built)) return *e;
  std::vector<int32_t> prompt = std::move(std::get<std::vector<int32_t>>(built));
  if (prompt.empty()) return ApiError{.message = "the prompt is empty", .param = "prompt"};
  if (params.endpoint == Endpoint::kChat && !params.max_tokens_set) {
    const int64_t room = ctx.max_model_len - static_cast<int64_t>(prompt.size());
    int64_t most = kDefaultChatMaxTokens;
    // The default fits the answer's bound too (the tokens and top logprobs of n choices).
    if (ctx.max_output_units > 0)
      most = std::min(most, ctx.max_output_units / (params.n * (1 + std::max(0, params.logprobs))));
    params.max_tokens = static_cast<int>(
        std::clamp<int64_t>(room, 1, std::max<int64_t>(most, params.adjust.min_tokens)));
    if (auto e = CheckOutputUnits(params, ctx.max_output_units)) return *e;
  }
  auto constraint = MakeConstraint(ctx, params);
  if (auto* e = std::get_if<ApiError>(&constraint)) return *e;
  const Constraint& con = std::get<Constraint>(constraint);
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
  const uint64_t seed = p.seed ? *p.seed : ctx.next_seed.fetch_add(p.n);
  for (int i = 0; i < p.n; ++i) {
    Choice& c = s->NewChoice(i);
    c.request = EngineRequest{.prompt = s->prompt_,
                              .sampling = {.temperature = p.temperature,
                                           .top_p = p.top_p,
                                           .top_k = p.top_k,
                                           .min_p = p.min_p,
                                           .seed = seed + static_cast<uint64_t>(i)},
                              .adjust = p.adjust,
                              .constraint = con.spec,
                              .max_tokens = p.max_tokens,
                              .use_default_stop = !p.ignore_eos,
                              .logprobs = p.logprobs};
    for (int32_t id : con.banned)
      c.request.adjust.logit_bias.emplace_back(id, -std::numeric_limits<float>::infinity());
    if (i > 0) continue;  // SubmitOthers, once the prompt is cached
    StatusOr<RoutedRequest> routed = ctx.router->Submit(c.request, c.stream);
    if (!routed.ok() && routed.status().code() == StatusCode::kUnavailable &&
        s->GroupsMayReturn()) {
      // A self-healing deployment between a failure and its restart: the request waits for a
      // group (TryResume, up to resume_timeout) instead of a 503.
      const auto now = std::chrono::steady_clock::now();
      c.resuming = true;
      c.failure = routed.status().message();
      c.failed_at = c.next_try = now + std::chrono::milliseconds(100);
      c.resume_deadline = now + ctx.resume_timeout;
      continue;
    }
    if (!routed.ok()) {
      if (routed.status().code() == StatusCode::kUnavailable)
        return ServerError(ForClient(routed.status().message()), 503);
      return ApiError{.message = routed.status().message(), .param = "prompt"};
    }
    c.routed = *routed;
  }
  s->others_submitted_ = p.n == 1;
  return s;
}

void CompletionSession::SubmitOthers() {
  if (others_submitted_) return;
  const Choice& first = *choices_[0];
  if (first.token_ids.empty() && !first.finished) return;
  others_submitted_ = true;
  for (size_t i = 1; i < choices_.size(); ++i) {
    Choice& c = *choices_[i];
    c.last_event = std::chrono::steady_clock::now();
    StatusOr<RoutedRequest> routed =
        ctx_.router->Submit(c.request, c.stream, /*exclude=*/-1, /*prefer=*/first.routed.group);
    if (routed.ok()) {
      c.routed = *routed;
      continue;
    }
    c.finished = true;
    c.finish = FinishReason::kError;
    c.error = routed.status().message();
  }
}

CompletionSession::CompletionSession(ServeContext& ctx, CompletionParams params,
                                     std::vector<int32_t> prompt)
    : ctx_(ctx),
      params_(std::move(params)),
      prompt_(std::move(prompt)),
      created_(static_cast<int64_t>(std::time(nullptr))),
      started_(std::chrono::steady_clock::now()) {
  ++ctx_.num_sessions;
  id_text_ = RandomId(params_.endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-",
                      reinterpret_cast<uintptr_t>(this));
}

CompletionSession::Choice& CompletionSession::NewChoice(int index) {
  auto c = std::make_unique<Choice>();
  c->index = index;
  c->last_event = started_;
  if (params_.endpoint == Endpoint::kChat)
    c->chat_out = std::make_unique<ChatOutput>(*ctx_.tokenizer, OutputOptions(ctx_, params_));
  else
    c->text_out = std::make_unique<OutputText>(*ctx_.tokenizer, params_.stop);
  if (!params_.stream && params_.logprobs >= 0)
    c->logprobs_text = std::make_unique<LogprobsText>(*ctx_.tokenizer, params_.endpoint);
  choices_.push_back(std::move(c));
  return *choices_.back();
}

CompletionSession::~CompletionSession() {
  for (auto& c : choices_) {
    if (!c->finished) CancelChoice(*c);
    if (c->routed.group >= 0)
      ctx_.router->Finished(c->routed, c->finished ? c->finish : FinishReason::kCancelled);
  }
  --ctx_.num_sessions;
}

void CompletionSession::CancelChoice(Choice& c) {
  if (c.routed.group >= 0) ctx_.router->Cancel(c.routed, FinishReason::kCancelled);
}

void CompletionSession::Cancel() {
  for (auto& c : choices_) CancelChoice(*c);
}

bool CompletionSession::GroupsMayReturn() const {
  return ctx_.groups_may_return && ctx_.groups_may_return();
}

bool CompletionSession::BeginResume(Choice& c, const std::string& why) {
  if (ctx_.draining || c.resumes >= ctx_.max_resumes) return false;
  std::fprintf(stderr, "epserve: %s choice %d: %s; resuming it after %zu tokens\n",
               id_text_.c_str(), c.index, why.c_str(), c.token_ids.size());
  ctx_.router->ReportFailure(c.routed.group, why);
  ctx_.router->Finished(c.routed, FinishReason::kError);
  ctx_.router->CountRetry();
  c.routed = {};
  c.resuming = true;
  ++c.resumes;
  c.failure = why;
  c.failed_at = std::chrono::steady_clock::now();
  c.resume_deadline = c.failed_at + ctx_.resume_timeout;
  c.next_try = c.failed_at;
  TryResume(c);
  return true;
}

void CompletionSession::TryResume(Choice& c) {
  const auto now = std::chrono::steady_clock::now();
  if (!c.resuming || now < c.next_try) return;
  c.next_try = now + std::chrono::milliseconds(100);
  EngineRequest r = c.request;
  const int done = static_cast<int>(c.token_ids.size());
  r.prompt.insert(r.prompt.end(), c.token_ids.begin(), c.token_ids.end());
  r.resumed_tokens = done;
  r.max_tokens -= done;  // >= 1: the engine ends a request with its last token
  r.adjust.min_tokens = std::max(0, r.adjust.min_tokens - done);
  auto stream = std::make_shared<RequestStream>();
  StatusOr<RoutedRequest> routed =
      r.max_tokens >= 1 ? ctx_.router->Submit(r, stream)
                        : StatusOr<RoutedRequest>(Status::Internal("no tokens left to resume"));
  if (routed.ok()) {
    c.routed = *routed;
    c.stream = std::move(stream);
    c.resuming = false;
    c.resumed = true;
    c.last_event = now;
    return;
  }
  const bool waiting = routed.status().code() == StatusCode::kUnavailable;
  // No group up yet: wait while one may come back (a world restarting, a group answering
  // again), up to the deadline.
  if (waiting && now < c.resume_deadline && (ctx_.router->num_up() > 0 || GroupsMayReturn()))
    return;
  c.resuming = false;
  c.finished = true;
  c.finish = FinishReason::kError;
  const auto limit = std::chrono::duration_cast<std::chrono::seconds>(ctx_.resume_timeout);
  c.error = c.failure + (waiting ? "; no group took the request back within " +
                                       std::to_string(limit.count()) + " s (--resume-timeout)"
                                 : "; resuming it failed: " + routed.status().message());
}

bool CompletionSession::Consume(Choice& c, const TokenEvent& ev, std::string* out) {
  if (ev.finish == FinishReason::kError && ev.retryable && BeginResume(c, ev.error))
    return true;  // the rest comes from the next group's stream
  const auto now = std::chrono::steady_clock::now();
  auto seconds = [](auto d) { return std::chrono::duration<double>(d).count(); };
  std::vector<ChatDelta> deltas;
  std::string text;
  if (ev.token >= 0) {
    if (c.resumed) {
      c.resumed = false;
      if (ctx_.metrics) ctx_.metrics->ObserveResume(seconds(now - c.failed_at));
    }
    if (c.token_ids.empty()) {
      c.cached_tokens = ev.cached_prompt_tokens;
      if (ctx_.metrics) ctx_.metrics->ObserveTimeToFirstToken(seconds(now - started_));
    } else if (ctx_.metrics) {
      ctx_.metrics->ObserveInterTokenLatency(seconds(now - c.last_token));
    }
    c.last_token = now;
    c.token_ids.push_back(ev.token);
    if (out != nullptr)
      c.pending_tokens.push_back(&ev);
    else if (c.logprobs_text)
      c.logprobs_text->Add(ev);
    if (c.chat_out)
      c.chat_out->Add(ev.token, &deltas);
    else
      text = c.text_out->Add(ev.token);
  }
  const bool stopped = c.chat_out ? c.chat_out->stopped() : c.text_out->stopped();
  if (stopped) {
    c.finish = FinishReason::kStop;
    // The engine need not generate past the stop string.
    ctx_.router->Cancel(c.routed, FinishReason::kStop);
  } else if (ev.finish != FinishReason::kNone) {
    c.finish = ev.finish;
    c.error = ev.error;
    if (c.chat_out)
      c.chat_out->Finish(&deltas);
    else
      text += c.text_out->Finish();
  } else {
    if (out != nullptr) {
      if (c.chat_out)
        EmitChat(c, deltas, nullptr, out);
      else
        EmitText(c, text, nullptr, out);
    } else if (c.text_out) {
      c.text += text;
    }
    return true;
  }
  c.finished = true;
  if (ctx_.metrics && (c.finish == FinishReason::kStop || c.finish == FinishReason::kLength))
    ctx_.metrics->ObserveEndToEnd(seconds(now - started_));
  const bool failed = c.finish == FinishReason::kError || c.finish == FinishReason::kCancelled;
  if (out != nullptr && !failed) {
    const std::string finish = FinishName(c);
    if (c.chat_out)
      EmitChat(c, deltas, finish.c_str(), out);
    else
      EmitText(c, text, finish.c_str(), out);
  } else if (c.text_out) {
    c.text += text;
  }
  return false;
}

std::string CompletionSession::FinishName(const Choice& c) const {
  if (c.chat_out && c.chat_out->truncated_call()) return "length";
  if (c.finish == FinishReason::kLength) return "length";
  if (c.chat_out && !c.chat_out->tool_calls().empty()) return "tool_calls";
  return "stop";
}

Json CompletionSession::Usage() const {
  int64_t n = 0, cached = 0, reasoning = 0;
  for (const auto& c : choices_) {
    n += static_cast<int64_t>(c->token_ids.size());
    if (c->chat_out) reasoning += c->chat_out->reasoning_tokens();
  }
  if (!choices_.empty()) cached = choices_[0]->cached_tokens;
  const int64_t p = static_cast<int64_t>(prompt_.size());
  Json u = {{"prompt_tokens", p},
            {"completion_tokens", n},
            {"total_tokens", p + n},
            {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  if (params_.endpoint == Endpoint::kChat)
    u["completion_tokens_details"] = {{"reasoning_tokens", reasoning}};
  return u;
}
Json CompletionSession::Logprobs(const std::vector<const TokenEvent*>& tokens,
                                 size_t text_offset) const {
  if (params_.logprobs < 0) return nullptr;
  return LogprobsJson(*ctx_.tokenizer, params_.endpoint, tokens, text_offset);
}

Json CompletionSession::Message(const Choice& c) const {
  const ChatOutput& o = *c.chat_out;
  Json m = {{"role", "assistant"}};
  m["content"] = o.content().empty() && !o.tool_calls().empty() ? Json(nullptr) : Json(o.content());
  if (!o.reasoning().empty()) m["reasoning_content"] = o.reasoning();
  if (!o.tool_calls().empty()) {
    Json calls = Json::array();
    for (const auto& t : o.tool_calls())
      calls.push_back({{"id", t.id},
                       {"type", "function"},
                       {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
    m["tool_calls"] = calls;
  }
  return m;
}

std::variant<Json, ApiError> CompletionSession::Collect(std::function<bool()> client_gone) {
  auto text = CollectText(std::move(client_gone));
  if (auto* e = std::get_if<ApiError>(&text)) return *e;
  return Json::parse(std::get<std::string>(text));
}

std::variant<std::string, ApiError> CompletionSession::CollectText(
    std::function<bool()> client_gone) {
  std::vector<TokenEvent> batch;
  auto next_check = std::chrono::steady_clock::now();
  for (auto& cp : choices_) {
    Choice& c = *cp;
    while (!c.finished) {
      batch.clear();
      if (client_gone && std::chrono::steady_clock::now() >= next_check) {
        next_check = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
        if (client_gone()) {
          Cancel();
          for (auto& o : choices_)
            if (!o->finished) {
              o->finished = true;
              o->finish = FinishReason::kCancelled;
            }
          return ApiError{.http_status = 499,
                          .message = "the client closed the connection",
                          .type = "server_error"};
        }
      }
      if (c.resuming) {
        TryResume(c);
        if (c.resuming) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      if (!c.stream->Pop(&batch, std::chrono::milliseconds(200))) {
        if (std::chrono::steady_clock::now() - c.last_event > ctx_.idle_timeout)
          return ServerError("the engine produced nothing for too long", 504);
        continue;
      }
      c.last_event = std::chrono::steady_clock::now();
      for (const TokenEvent& ev : batch)
        if (!Consume(c, ev, nullptr)) break;
      SubmitOthers();
    }
    if (c.finish == FinishReason::kError)
      return ServerError("generation failed: " + ForClient(c.error));
    if (c.finish == FinishReason::kCancelled) return ServerError("the request was cancelled", 503);
  }
  // The JSON nlohmann::json would write for the answer (its objects' keys sorted), written
  // directly: the logprobs, nearly all of a large answer, were written as the tokens came.
  size_t size = 1024;
  for (const auto& c : choices_)
    size += (c->logprobs_text ? c->logprobs_text->size() : 0) + c->text.size() * 11 / 10 +
            (params_.return_token_ids ? c->token_ids.size() * 7 : 0);
  std::string out;
  out.reserve(size);
  out += "{\"choices\":[";
  for (auto& cp : choices_) {
    Choice& c = *cp;
    if (c.index > 0) out += ',';
    out += "{\"finish_reason\":" + Json(FinishName(c)).dump();
    out += ",\"index\":" + std::to_string(c.index) + ",\"logprobs\":";
    if (c.logprobs_text) {
      c.logprobs_text->AppendTo(&out);
    } else {
      out += "null";
    }
    if (c.chat_out)
      out += ",\"message\":" + Message(c).dump();
    else
      out += ",\"text\":" + Json(c.text).dump();
    if (params_.return_token_ids) {
      out += ",\"token_ids\":[";
      for (size_t i = 0; i < c.token_ids.size(); ++i)
        (out += i > 0 ? "," : "") += std::to_string(c.token_ids[i]);
      out += ']';
    }
    out += '}';
  }
  out += "],\"created\":" + std::to_string(created_);
  out += ",\"id\":" + Json(id_text_).dump();
  out += ",\"model\":" + Json(ctx_.model_name).dump();
  out += params_.endpoint == Endpoint::kChat ? ",\"object\":\"chat.completion\""
                                             : ",\"object\":\"text_completion\"";
  out += ",\"usage\":" + Usage().dump() + "}";
  return out;
}

Json CompletionSession::ChunkEnvelope(Json choice, bool with_usage) const {
  Json chunk = {
      {"id", id_text_},
      {"object", params_.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
      {"created", created_},
      {"model", ctx_.model_name},
      {"choices", Json::array({std::move(choice)})}};
  if (params_.include_usage || params_.continuous_usage)
    chunk["usage"] = with_usage && params_.continuous_usage ? Usage() : Json(nullptr);
  return chunk;
}

void CompletionSession::EmitText(Choice& c, const std::string& text, const char* finish,
                                 std::string* out) {
  const size_t offset = c.text.size();
  c.text += text;
  if (text.empty() && finish == nullptr && !params_.return_token_ids &&
      (params_.logprobs < 0 || c.pending_tokens.empty()))
    return;
  Json choice = {{"index", c.index}, {"text", text}};
  choice["logprobs"] = Logprobs(c.pending_tokens, offset);
  choice["finish_reason"] = finish != nullptr ? Json(finish) : Json(nullptr);
  if (params_.return_token_ids) {
    Json ids = Json::array();
    for (const TokenEvent* ev : c.pending_tokens) ids.push_back(ev->token);
    choice["token_ids"] = ids;
  }
  c.pending_tokens.clear();
  *out += "data: " + ChunkEnvelope(std::move(choice), true).dump() + "\n\n";
}

void CompletionSession::EmitChat(Choice& c, const std::vector<ChatDelta>& deltas,
                                 const char* finish, std::string* out) {
  // One chunk per delta (reasoning, content and tool calls never share one); the tokens'
  // logprobs and ids go with the first chunk after them. An event with tokens but no text
  // still sends them when the client asked for logprobs or ids; the finish has its own chunk
  // when no delta carries it.
  auto send = [&](Json delta, const char* fin) {
    if (!c.sent_role) {
      delta["role"] = "assistant";
      c.sent_role = true;
    }
    Json choice = {{"index", c.index}, {"delta", std::move(delta)}};
    choice["logprobs"] = Logprobs(c.pending_tokens, 0);
    choice["finish_reason"] = fin != nullptr ? Json(fin) : Json(nullptr);
    if (params_.return_token_ids) {
      Json ids = Json::array();
      for (const TokenEvent* ev : c.pending_tokens) ids.push_back(ev->token);
      choice["token_ids"] = ids;
    }
    c.pending_tokens.clear();
    *out += "data: " + ChunkEnvelope(std::move(choice), true).dump() + "\n\n";
  };
  for (const ChatDelta& d : deltas) {
    Json delta = Json::object();
    if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
    if (!d.content.empty()) delta["content"] = d.content;
    if (!d.tool_calls.empty()) {
      Json calls = Json::array();
      for (const ToolCallDelta& t : d.tool_calls) {
        Json call = {{"index", t.index}};
        if (!t.id.empty()) {
          call["id"] = t.id;
          call["type"] = "function";
          call["function"] = {{"name", t.name}, {"arguments", t.arguments}};
        } else {
          call["function"] = {{"arguments", t.arguments}};
        }
        calls.push_back(call);
      }
      delta["tool_calls"] = calls;
    }
    if (delta.empty()) continue;
    send(std::move(delta), nullptr);
  }
  const bool pending =
      !c.pending_tokens.empty() && (params_.logprobs >= 0 || params_.return_token_ids);
  if (finish != nullptr || pending) send(Json::object(), finish);
}

bool CompletionSession::NextSse(std::string* out, std::chrono::milliseconds wait) {
  auto emit = [out](const Json& j) { *out += "data: " + j.dump() + "\n\n"; };
  if (sent_done_) return true;
  // The first chunk of a chat choice is its role with empty content (OpenAI's shape).
  if (params_.endpoint == Endpoint::kChat)
    for (auto& c : choices_) {
      if (c->sent_role) continue;
      c->sent_role = true;
      emit(ChunkEnvelope({{"index", c->index},
                          {"delta", {{"role", "assistant"}, {"content", ""}}},
                          {"logprobs", nullptr},
                          {"finish_reason", nullptr}},
                         false));
    }
  std::vector<Choice*> open;
  for (auto& c : choices_)
    if (!c->finished && (c->index == 0 || others_submitted_)) open.push_back(c.get());
  const auto share = std::max(std::chrono::milliseconds(1),
                              wait / static_cast<int>(std::max<size_t>(1, open.size())));
  for (size_t k = 0; k < open.size(); ++k) {
    Choice& c = *open[(k + next_poll_) % open.size()];
    std::vector<TokenEvent> batch;
    if (c.resuming) {
      TryResume(c);
      if (c.resuming) std::this_thread::sleep_for(std::min(share, std::chrono::milliseconds(50)));
      continue;
    }
    if (!c.stream->Pop(&batch, share)) {
      if (std::chrono::steady_clock::now() - c.last_event <= ctx_.idle_timeout) continue;
      c.finished = true;
      c.finish = FinishReason::kError;
      c.error = "the engine produced nothing for too long";
      CancelChoice(c);
      continue;
    }
    c.last_event = std::chrono::steady_clock::now();
    for (TokenEvent& ev : batch) {
      c.events.push_back(std::move(ev));
      if (!Consume(c, c.events.back(), out)) break;
    }
  }
  SubmitOthers();
  next_poll_ = open.empty() ? 0 : (next_poll_ + 1) % static_cast<int>(open.size());
  for (auto& c : choices_) {
    if (!c->finished) return false;
  }
  for (auto& c : choices_) {
    if (c->finish == FinishReason::kError || c->finish == FinishReason::kCancelled) {
      emit(ServerError(c->finish == FinishReason::kError
                           ? "generation failed: " + ForClient(c->error)
                           : "the request was cancelled")
               .Body());
      *out += "data: [DONE]\n\n";
      sent_done_ = true;
      return true;
    }
  }
  if (params_.include_usage) {
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
