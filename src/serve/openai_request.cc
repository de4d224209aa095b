#include "serve/openai_request.h"

#include <cmath>

namespace epserve::serve {

nlohmann::json ApiError::Body() const {
  nlohmann::json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return {{"error", e}};
}

namespace {

using Json = nlohmann::ordered_json;

ApiError Bad(const std::string& param, const std::string& message) {
  return ApiError{.http_status = 400, .message = message, .param = param};
}

// Reads an optional number field into *out within [lo, hi].
std::optional<ApiError> Number(const Json& body, const char* key, double lo, double hi,
                               float* out) {
  if (!body.contains(key) || body[key].is_null()) return std::nullopt;
  if (!body[key].is_number()) return Bad(key, std::string("'") + key + "' must be a number");
  const double v = body[key].get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    return Bad(key, std::string("'") + key + "' must be in [" + Json(lo).dump() + ", " +
                        Json(hi).dump() + "], got " + body[key].dump());
  *out = static_cast<float>(v);
  return std::nullopt;
}

std::optional<ApiError> Integer(const Json& body, const char* key, int64_t lo, int64_t hi,
                                int* out) {
  if (!body.contains(key) || body[key].is_null()) return std::nullopt;
  if (!body[key].is_number_integer())
    return Bad(key, std::string("'") + key + "' must be an integer");
  const int64_t v = body[key].get<int64_t>();
  if (v < lo || v > hi)
    return Bad(key, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "], got " + std::to_string(v));
  *out = static_cast<int>(v);
  return std::nullopt;
}

std::optional<ApiError> Bool(const Json& body, const char* key, bool* out) {
  if (!body.contains(key) || body[key].is_null()) return std::nullopt;
  if (!body[key].is_boolean()) return Bad(key, std::string("'") + key + "' must be a boolean");
  *out = body[key].get<bool>();
  return std::nullopt;
}

std::optional<ApiError> ParsePrompt(const Json& body, CompletionParams* p) {
  if (!body.contains("prompt") || body["prompt"].is_null())
    return Bad("prompt", "'prompt' is required");
  const Json& prompt = body["prompt"];
  if (prompt.is_string()) {
    p->prompt_text = prompt.get<std::string>();
    return std::nullopt;
  }
  if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_string()) {
    p->prompt_text = prompt[0].get<std::string>();
    return std::nullopt;
  }
  if (!prompt.is_array() || prompt.empty())
    return Bad("prompt", "'prompt' must be a string or a non-empty array of token ids");
  for (const Json& id : prompt) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      return Bad("prompt", "'prompt' must be a string or a non-empty array of token ids");
    p->prompt_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return std::nullopt;
}

std::optional<ApiError> ParseMessages(const Json& body, CompletionParams* p) {
  if (!body.contains("messages") || body["messages"].is_null())
    return Bad("messages", "'messages' is required");
  const Json& messages = body["messages"];
  if (!messages.is_array() || messages.empty())
    return Bad("messages", "'messages' must be a non-empty array");
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return Bad(where, "'" + where + "' must be an object with a string 'role'");
    if (m.contains("content") && !m["content"].is_string() && !m["content"].is_null() &&
        !m["content"].is_array())
      return Bad(where + ".content", "'" + where + ".content' must be a string or an array");
  }
  p->messages = messages;
  // Content-part arrays (what OpenAI's clients send for multi-part messages) become the text
  // of their parts joined by newlines, as chat templates expect a string; a part that is not
  // text is refused by its type. A null content (an assistant turn that only calls tools)
  // stays null for the template.
  for (size_t i = 0; i < p->messages.size(); ++i) {
    Json& m = p->messages[i];
    if (!m.contains("content") || !m["content"].is_array()) continue;
    const std::string where = "messages[" + std::to_string(i) + "].content";
    std::string text;
    for (size_t k = 0; k < m["content"].size(); ++k) {
      const Json& part = m["content"][k];
      const std::string at = where + "[" + std::to_string(k) + "]";
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
        return Bad(where, "'" + at + "' must be an object with a string 'type'");
      const std::string type = part["type"].get<std::string>();
      if (type != "text")
        return Bad(where, "'" + at + "' is a content part of type '" + type +
                              "'; this model takes only 'text' parts");
      if (!part.contains("text") || !part["text"].is_string())
        return Bad(where, "'" + at + ".text' must be a string");
      if (k > 0) text += "\n";
      text += part["text"].get<std::string>();
    }
    m["content"] = text;
  }
  return std::nullopt;
}

std::optional<ApiError> ParseStop(const Json& body, CompletionParams* p) {
  if (!body.contains("stop") || body["stop"].is_null()) return std::nullopt;
  const Json& stop = body["stop"];
  if (stop.is_string()) {
    if (!stop.get<std::string>().empty()) p->stop.push_back(stop.get<std::string>());
    return std::nullopt;
  }
  if (!stop.is_array()) return Bad("stop", "'stop' must be a string or an array of strings");
  for (const Json& s : stop) {
    if (!s.is_string()) return Bad("stop", "'stop' must be a string or an array of strings");
    if (!s.get<std::string>().empty()) p->stop.push_back(s.get<std::string>());
  }
  return std::nullopt;
}

std::optional<ApiError> ParseLogprobs(const Json& body, CompletionParams* p) {
  if (p->endpoint == Endpoint::kCompletions) {
    int n = -1;
    if (auto e = Integer(body, "logprobs", 0, 20, &n)) return e;
    p->logprobs = n;
    return std::nullopt;
  }
  bool want = false;
  int top = 0;
  if (auto e = Bool(body, "logprobs", &want)) return e;
  if (auto e = Integer(body, "top_logprobs", 0, 20, &top)) return e;
  if (top > 0 && !want) return Bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  p->logprobs = want ? top : -1;
  return std::nullopt;
}

}  // namespace

std::variant<CompletionParams, ApiError> ParseCompletionRequest(const Json& body,
                                                                Endpoint endpoint) {
  CompletionParams p;
  p.endpoint = endpoint;
  if (!body.is_object()) return Bad("", "the request body must be a JSON object");
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) return Bad("model", "'model' must be a string");
    p.model = body["model"].get<std::string>();
  }
  if (auto e = endpoint == Endpoint::kChat ? ParseMessages(body, &p) : ParsePrompt(body, &p))
    return *e;
  const char* max_key = endpoint == Endpoint::kChat && body.contains("max_completion_tokens") &&
                                !body["max_completion_tokens"].is_null()
                            ? "max_completion_tokens"
                            : "max_tokens";
  if (auto e = Integer(body, max_key, 1, INT32_MAX, &p.max_tokens)) return *e;
  if (auto e = Number(body, "temperature", 0, 2, &p.temperature)) return *e;
  if (auto e = Number(body, "top_p", 0, 1, &p.top_p)) return *e;
  if (p.top_p <= 0) return Bad("top_p", "'top_p' must be in (0, 1]");
  int top_k = 0;
  if (auto e = Integer(body, "top_k", -1, INT32_MAX, &top_k)) return *e;
  p.top_k = top_k < 0 ? 0 : top_k;
  if (body.contains("seed") && !body["seed"].is_null()) {
    if (!body["seed"].is_number_integer()) return Bad("seed", "'seed' must be an integer");
    p.seed = body["seed"].is_number_unsigned() ? body["seed"].get<uint64_t>()
                                               : static_cast<uint64_t>(body["seed"].get<int64_t>());
  }
  int n = 1;
  if (auto e = Integer(body, "n", 1, INT32_MAX, &n)) return *e;
  if (n != 1) return Bad("n", "only n = 1 is supported");
  if (auto e = ParseStop(body, &p)) return *e;
  if (auto e = ParseLogprobs(body, &p)) return *e;
  if (auto e = Bool(body, "stream", &p.stream)) return *e;
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const Json& so = body["stream_options"];
    if (!so.is_object()) return Bad("stream_options", "'stream_options' must be an object");
    if (auto e = Bool(so, "include_usage", &p.include_usage)) return *e;
  }
  if (auto e = Bool(body, "ignore_eos", &p.ignore_eos)) return *e;
  if (auto e = Bool(body, "return_token_ids", &p.return_token_ids)) return *e;
  if (body.contains("user") && !body["user"].is_null() && !body["user"].is_string())
    return Bad("user", "'user' must be a string");
  return p;
}

}  // namespace epserve::serve
