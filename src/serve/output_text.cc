#include "serve/output_text.h"

#include <algorithm>
#include <cstring>

namespace epserve::serve {

namespace {

using Json = nlohmann::json;

// One token of chat's "content": {"bytes", "logprob", "token", "top_logprobs"}.
Json ChatEntry(const text::Tokenizer& tok, const TokenEvent& ev) {
  auto entry = [&](int32_t id, float lp) {
    return Json{{"token", TokenText(tok, id)}, {"logprob", lp}, {"bytes", TokenBytes(tok, id)}};
  };
  Json e = entry(ev.token, ev.logprob);
  e["top_logprobs"] = Json::array();
  for (const auto& [id, lp] : ev.top_logprobs) e["top_logprobs"].push_back(entry(id, lp));
  return e;
}

// One token of completions' "top_logprobs": {text: logprob}; tokens of the same text (lossy
// texts of partial characters) are one key, the last one's.
Json CompletionTop(const text::Tokenizer& tok, const TokenEvent& ev) {
  Json top = Json::object();
  for (const auto& [id, lp] : ev.top_logprobs) top[TokenText(tok, id)] = lp;
  return top;
}

// nlohmann::json's objects keep their keys sorted: these are LogprobsJson's in its order.
constexpr const char* kContentOpen = "{\"content\":[";
constexpr const char* kContentClose = "]}";
constexpr const char* kCompletionKeys[] = {"{\"text_offset\":[", "],\"token_logprobs\":[",
                                           "],\"tokens\":[", "],\"top_logprobs\":[", "]}"};

}  // namespace

OutputText::OutputText(const text::Tokenizer& tokenizer, std::vector<std::string> stop)
    : decoder_(tokenizer, {.skip_special_tokens = true}), stop_(std::move(stop)) {}

std::string OutputText::Add(int32_t id) {
  if (stopped_) return "";
  StatusOr<std::string> piece = decoder_.Add(id);
  // An id the tokenizer does not define (a random model's vocabulary may be larger) adds no text.
  return Release(piece.ok() ? *piece : std::string());
}

std::string OutputText::Finish() {
  if (stopped_) return "";
  std::string rest = Release(decoder_.Finish());
  if (stopped_) return rest;
  rest += held_;
  held_.clear();
  return rest;
}

std::string OutputText::Release(std::string more) {
  held_ += more;
  if (stop_.empty()) {
    std::string out;
    out.swap(held_);
    return out;
  }
  size_t first = std::string::npos;
  for (const std::string& s : stop_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that begins some stop string. Stop strings are valid UTF-8,
  // so such a suffix starts on a character boundary.
  size_t keep = 0;
  for (const std::string& s : stop_)
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k)
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string TokenText(const text::Tokenizer& tokenizer, int32_t id) {
  StatusOr<std::string> s = tokenizer.Decode(std::vector<int32_t>{id});
  return s.ok() ? *s : std::string();
}

std::vector<uint8_t> TokenBytes(const text::Tokenizer& tokenizer, int32_t id) {
  std::string bytes;
  if (!tokenizer.DecodeBytes(std::vector<int32_t>{id}, {}, &bytes).ok()) return {};
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

Json LogprobsJson(const text::Tokenizer& tokenizer, Endpoint endpoint,
                  const std::vector<const TokenEvent*>& tokens, size_t text_offset) {
  if (endpoint == Endpoint::kChat) {
    Json content = Json::array();
    for (const TokenEvent* ev : tokens) content.push_back(ChatEntry(tokenizer, *ev));
    return {{"content", content}};
  }
  Json out = {{"tokens", Json::array()},
              {"token_logprobs", Json::array()},
              {"top_logprobs", Json::array()},
              {"text_offset", Json::array()}};
  size_t offset = text_offset;
  for (const TokenEvent* ev : tokens) {
    const std::string t = TokenText(tokenizer, ev->token);
    out["tokens"].push_back(t);
    out["token_logprobs"].push_back(ev->logprob);
    out["top_logprobs"].push_back(CompletionTop(tokenizer, *ev));
    out["text_offset"].push_back(offset);
    offset += t.size();
  }
  return out;
}

LogprobsText::LogprobsText(const text::Tokenizer& tokenizer, Endpoint endpoint)
    : tokenizer_(tokenizer), endpoint_(endpoint) {}

void LogprobsText::Add(const TokenEvent& ev) {
  const char* sep = num_tokens_++ > 0 ? "," : "";
  if (endpoint_ == Endpoint::kChat) {
    content_ += sep;
    content_ += ChatEntry(tokenizer_, ev).dump();
    return;
  }
  const std::string t = TokenText(tokenizer_, ev.token);
  (text_offset_ += sep) += std::to_string(offset_);
  (token_logprobs_ += sep) += Json(ev.logprob).dump();
  (tokens_ += sep) += Json(t).dump();
  (top_logprobs_ += sep) += CompletionTop(tokenizer_, ev).dump();
  offset_ += t.size();
}

size_t LogprobsText::size() const {
  if (endpoint_ == Endpoint::kChat)
    return std::strlen(kContentOpen) + content_.size() + std::strlen(kContentClose);
  size_t n = text_offset_.size() + token_logprobs_.size() + tokens_.size() + top_logprobs_.size();
  for (const char* k : kCompletionKeys) n += std::strlen(k);
  return n;
}

void LogprobsText::AppendTo(std::string* out) {
  // Each part is freed once copied, so the answer and its parts are not all held at once.
  auto move = [out](std::string& part) {
    *out += part;
    std::string().swap(part);
  };
  if (endpoint_ == Endpoint::kChat) {
    *out += kContentOpen;
    move(content_);
    *out += kContentClose;
  } else {
    std::string* parts[] = {&text_offset_, &token_logprobs_, &tokens_, &top_logprobs_};
    for (int i = 0; i < 4; ++i) {
      *out += kCompletionKeys[i];
      move(*parts[i]);
    }
    *out += kCompletionKeys[4];
  }
  num_tokens_ = offset_ = 0;
}

}  // namespace epserve::serve
