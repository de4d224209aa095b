#include "serve/openai_request.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <set>

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

// Every field a request may carry; any other is a 400 naming it (never silently ignored).
std::optional<ApiError> CheckKnownFields(const Json& body, Endpoint endpoint) {
  static const std::set<std::string> kCommon = {"model",
                                                "max_tokens",
                                                "temperature",
                                                "top_p",
                                                "top_k",
                                                "seed",
                                                "n",
                                                "stop",
                                                "logprobs",
                                                "stream",
                                                "stream_options",
                                                "ignore_eos",
                                                "return_token_ids",
                                                "user",
                                                "presence_penalty",
                                                "frequency_penalty",
                                                "repetition_penalty",
                                                "logit_bias",
                                                "min_tokens",
                                                "min_p"};
  static const std::set<std::string> kChat = {
      "messages",         "max_completion_tokens", "top_logprobs",          "tools",
      "tool_choice",      "parallel_tool_calls",   "response_format",       "chat_template_kwargs",
      "reasoning_effort", "add_generation_prompt", "continue_final_message"};
  for (const auto& [key, value] : body.items()) {
    if (kCommon.count(key) || (endpoint == Endpoint::kChat ? kChat.count(key) : key == "prompt"))
      continue;
    if (value.is_null()) continue;  // clients send absent fields as null
    std::string hint;
    if (key == "functions" || key == "function_call") hint = " (use 'tools' and 'tool_choice')";
    return Bad(key, "'" + key + "' is not supported by this server" + hint);
  }
  return std::nullopt;
}

std::optional<ApiError> ParseAdjustments(const Json& body, CompletionParams* p) {
  if (auto e = Number(body, "presence_penalty", -2, 2, &p->adjust.presence_penalty)) return e;
  if (auto e = Number(body, "frequency_penalty", -2, 2, &p->adjust.frequency_penalty)) return e;
  if (auto e = Number(body, "repetition_penalty", 0, 100, &p->adjust.repetition_penalty)) return e;
  if (p->adjust.repetition_penalty <= 0)
    return Bad("repetition_penalty", "'repetition_penalty' must be > 0");
  if (auto e = Number(body, "min_p", 0, 1, &p->min_p)) return e;
  if (auto e = Integer(body, "min_tokens", 0, INT32_MAX, &p->adjust.min_tokens)) return e;
  if (p->adjust.min_tokens > p->max_tokens)
    return Bad("min_tokens", "'min_tokens' (" + std::to_string(p->adjust.min_tokens) +
                                 ") must not exceed the maximum tokens (" +
                                 std::to_string(p->max_tokens) + ")");
  if (body.contains("logit_bias") && !body["logit_bias"].is_null()) {
    const Json& bias = body["logit_bias"];
    if (!bias.is_object())
      return Bad("logit_bias", "'logit_bias' must be an object of token ids to numbers");
    if (bias.size() > 300) return Bad("logit_bias", "'logit_bias' may hold at most 300 tokens");
    for (const auto& [key, value] : bias.items()) {
      char* end = nullptr;
      const long id = std::strtol(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < 0 || id > INT32_MAX)
        return Bad("logit_bias", "'logit_bias' key \"" + key + "\" is not a token id");
      if (!value.is_number() || value.get<double>() < -100 || value.get<double>() > 100)
        return Bad("logit_bias",
                   "'logit_bias' value of token " + key + " must be a number in [-100, 100]");
      p->adjust.logit_bias.emplace_back(static_cast<int32_t>(id), value.get<float>());
    }
  }
  return std::nullopt;
}

std::optional<ApiError> ParseTools(const Json& body, CompletionParams* p) {
  std::set<std::string> names;
  if (body.contains("tools") && !body["tools"].is_null()) {
    const Json& tools = body["tools"];
    if (!tools.is_array()) return Bad("tools", "'tools' must be an array");
    for (size_t i = 0; i < tools.size(); ++i) {
      const Json& t = tools[i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || !t.contains("type") || t["type"] != "function")
        return Bad("tools", "'" + at + "' must be an object with \"type\": \"function\"");
      if (!t.contains("function") || !t["function"].is_object() ||
          !t["function"].contains("name") || !t["function"]["name"].is_string() ||
          t["function"]["name"].get<std::string>().empty())
        return Bad("tools", "'" + at + ".function' must be an object with a non-empty 'name'");
      const std::string name = t["function"]["name"].get<std::string>();
      for (unsigned char ch : name)
        if (!(std::isalnum(ch) || ch == '_' || ch == '-' || ch == '.'))
          return Bad("tools", "'" + at +
                                  ".function.name' may hold only letters, digits, '_', "
                                  "'-' and '.', got \"" +
                                  name + "\"");
      if (!names.insert(name).second)
        return Bad("tools", "'" + at + "': a second function named \"" + name + "\"");
      if (t["function"].contains("parameters") && !t["function"]["parameters"].is_null() &&
          !t["function"]["parameters"].is_object())
        return Bad("tools", "'" + at + ".function.parameters' must be a JSON Schema object");
    }
    if (!tools.empty()) p->tools = tools;
  }
  if (auto e = Bool(body, "parallel_tool_calls", &p->parallel_tool_calls)) return e;
  if (!body.contains("tool_choice") || body["tool_choice"].is_null()) {
    p->tool_choice = p->tools.is_null() ? ToolChoice::kNone : ToolChoice::kAuto;
    return std::nullopt;
  }
  const Json& choice = body["tool_choice"];
  if (choice == "none") {
    p->tool_choice = ToolChoice::kNone;
  } else if (choice == "auto" || choice == "required") {
    p->tool_choice = choice == "auto" ? ToolChoice::kAuto : ToolChoice::kRequired;
  } else if (choice.is_object() && choice.contains("function") && choice["function"].is_object() &&
             choice["function"].contains("name") && choice["function"]["name"].is_string()) {
    p->tool_choice = ToolChoice::kNamed;
    p->tool_name = choice["function"]["name"].get<std::string>();
    if (!names.count(p->tool_name))
      return Bad("tool_choice", "'tool_choice' names the function \"" + p->tool_name +
                                    "\", which is not in 'tools'");
  } else {
    return Bad("tool_choice",
               "'tool_choice' must be \"none\", \"auto\", \"required\" or "
               "{\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  if (p->tool_choice != ToolChoice::kNone && p->tools.is_null())
    return Bad("tool_choice", "'tool_choice' asks for tool calls but the request has no 'tools'");
  return std::nullopt;
}

std::optional<ApiError> ParseResponseFormat(const Json& body, CompletionParams* p) {
  if (!body.contains("response_format") || body["response_format"].is_null()) return std::nullopt;
  const Json& rf = body["response_format"];
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
    return Bad("response_format", "'response_format' must be an object with a string 'type'");
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    p->response_format = ResponseFormat::kJsonObject;
    return std::nullopt;
  }
  if (type != "json_schema")
    return Bad("response_format",
               "'response_format.type' must be \"text\", \"json_object\" or "
               "\"json_schema\", got \"" +
                   type + "\"");
  if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
    return Bad("response_format", "'response_format.json_schema' must be an object");
  const Json& js = rf["json_schema"];
  if (!js.contains("schema") || !(js["schema"].is_object() || js["schema"].is_boolean()))
    return Bad("response_format",
               "'response_format.json_schema.schema' must be a JSON Schema (an object, or true)");
  p->response_format = ResponseFormat::kJsonSchema;
  p->json_schema = js["schema"];
  return std::nullopt;
}

std::optional<ApiError> ParseTemplateOptions(const Json& body, CompletionParams* p) {
  if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
    const Json& kw = body["chat_template_kwargs"];
    if (!kw.is_object())
      return Bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    static const std::set<std::string> kReserved = {"messages", "tools", "bos_token", "eos_token",
                                                    "add_generation_prompt"};
    for (const auto& [key, value] : kw.items())
      if (kReserved.count(key))
        return Bad("chat_template_kwargs", "'chat_template_kwargs." + key +
                                               "' is set by the server; use the request field");
    p->template_kwargs = kw;
  }
  if (body.contains("reasoning_effort") && !body["reasoning_effort"].is_null()) {
    static const std::set<std::string> kEfforts = {"none", "minimal", "low", "medium",
                                                   "high", "xhigh",   "max"};
    const Json& e = body["reasoning_effort"];
    if (!e.is_string() || !kEfforts.count(e.get<std::string>()))
      return Bad("reasoning_effort",
                 "'reasoning_effort' must be one of \"none\", \"minimal\", \"low\", "
                 "\"medium\", \"high\", \"xhigh\", \"max\"");
    p->reasoning_effort = e.get<std::string>();
  }
  if (auto e = Bool(body, "add_generation_prompt", &p->add_generation_prompt)) return e;
  if (auto e = Bool(body, "continue_final_message", &p->continue_final_message)) return e;
  if (p->continue_final_message) {
    if (p->add_generation_prompt && body.contains("add_generation_prompt") &&
        !body["add_generation_prompt"].is_null())
      return Bad("continue_final_message",
                 "'continue_final_message' and 'add_generation_prompt' cannot both be true");
    p->add_generation_prompt = false;
    const Json& last = p->messages.back();
    if (last["role"] != "assistant" || !last.contains("content") || !last["content"].is_string())
      return Bad("continue_final_message",
                 "'continue_final_message' needs a last message of "
                 "role \"assistant\" with string content");
  }
  return std::nullopt;
}

}  // namespace

std::variant<CompletionParams, ApiError> ParseCompletionRequest(const Json& body, Endpoint endpoint,
                                                                const SamplingDefaults& defaults) {
  CompletionParams p;
  p.endpoint = endpoint;
  p.temperature = defaults.temperature;
  p.top_p = defaults.top_p;
  p.top_k = defaults.top_k;
  if (!body.is_object()) return Bad("", "the request body must be a JSON object");
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) return Bad("model", "'model' must be a string");
    p.model = body["model"].get<std::string>();
  }
  if (auto e = endpoint == Endpoint::kChat ? ParseMessages(body, &p) : ParsePrompt(body, &p))
    return *e;
  if (auto e = CheckKnownFields(body, endpoint)) return *e;
  const char* max_key = endpoint == Endpoint::kChat && body.contains("max_completion_tokens") &&
                                !body["max_completion_tokens"].is_null()
                            ? "max_completion_tokens"
                            : "max_tokens";
  if (auto e = Integer(body, max_key, 1, INT32_MAX, &p.max_tokens)) return *e;
  p.max_tokens_set = body.contains(max_key) && !body[max_key].is_null();
  if (endpoint == Endpoint::kChat && !p.max_tokens_set) p.max_tokens = kDefaultChatMaxTokens;
  if (auto e = Number(body, "temperature", 0, 2, &p.temperature)) return *e;
  if (auto e = Number(body, "top_p", 0, 1, &p.top_p)) return *e;
  if (p.top_p <= 0) return Bad("top_p", "'top_p' must be in (0, 1]");
  int top_k = p.top_k;
  if (auto e = Integer(body, "top_k", -1, INT32_MAX, &top_k)) return *e;
  p.top_k = top_k < 0 ? 0 : top_k;
  if (body.contains("seed") && !body["seed"].is_null()) {
    if (!body["seed"].is_number_integer()) return Bad("seed", "'seed' must be an integer");
    p.seed = body["seed"].is_number_unsigned() ? body["seed"].get<uint64_t>()
                                               : static_cast<uint64_t>(body["seed"].get<int64_t>());
  }
  if (auto e = Integer(body, "n", 1, kMaxChoices, &p.n)) return *e;
  if (auto e = ParseAdjustments(body, &p)) return *e;
  if (auto e = ParseStop(body, &p)) return *e;
  if (auto e = ParseLogprobs(body, &p)) return *e;
  if (auto e = Bool(body, "stream", &p.stream)) return *e;
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const Json& so = body["stream_options"];
    if (!so.is_object()) return Bad("stream_options", "'stream_options' must be an object");
    if (auto e = Bool(so, "include_usage", &p.include_usage)) return *e;
    if (auto e = Bool(so, "continuous_usage_stats", &p.continuous_usage)) return *e;
    for (const auto& [key, value] : so.items())
      if (key != "include_usage" && key != "continuous_usage_stats" && !value.is_null())
        return Bad("stream_options",
                   "'stream_options." + key + "' is not supported by this server");
  }
  if (endpoint == Endpoint::kChat) {
    if (auto e = ParseTools(body, &p)) return *e;
    if (auto e = ParseResponseFormat(body, &p)) return *e;
    if (auto e = ParseTemplateOptions(body, &p)) return *e;
    if (p.response_format != ResponseFormat::kText &&
        (p.tool_choice == ToolChoice::kRequired || p.tool_choice == ToolChoice::kNamed))
      return Bad("response_format",
                 "'response_format' cannot be combined with a forced 'tool_choice'");
  }
  if (auto e = Bool(body, "ignore_eos", &p.ignore_eos)) return *e;
  if (auto e = Bool(body, "return_token_ids", &p.return_token_ids)) return *e;
  if (body.contains("user") && !body["user"].is_null() && !body["user"].is_string())
    return Bad("user", "'user' must be a string");
  return p;
}

int64_t OutputUnits(const CompletionParams& params) {
  return int64_t{params.n} * params.max_tokens * (1 + std::max(0, params.logprobs));
}

std::optional<ApiError> CheckOutputUnits(const CompletionParams& params, int64_t max_units) {
  const int64_t units = OutputUnits(params);
  if (max_units <= 0 || units <= max_units) return std::nullopt;
  const char* top = params.endpoint == Endpoint::kChat ? "top_logprobs" : "logprobs";
  return Bad("max_tokens",
             "the answer may be too large: n * max_tokens * (1 + " + std::string(top) + ") = " +
                 std::to_string(params.n) + " * " + std::to_string(params.max_tokens) + " * " +
                 std::to_string(1 + std::max(0, params.logprobs)) + " = " + std::to_string(units) +
                 " output units, over this server's " + std::to_string(max_units) +
                 " (--max-output-units); lower max_tokens, n or " + top);
}

std::variant<CompletionParams, ApiError> ParseTokenizeRequest(const Json& body) {
  if (!body.is_object()) return Bad("", "the request body must be a JSON object");
  bool strs = false;
  if (auto e = Bool(body, "return_token_strs", &strs)) return *e;
  static const std::set<std::string> kChatShape = {"messages",
                                                   "tools",
                                                   "chat_template_kwargs",
                                                   "reasoning_effort",
                                                   "add_generation_prompt",
                                                   "continue_final_message",
                                                   "model"};
  if (body.contains("messages")) {
    Json chat = Json::object();
    for (const auto& [key, value] : body.items()) {
      if (key == "return_token_strs") continue;
      if (!kChatShape.count(key)) {
        if (value.is_null()) continue;
        return Bad(key, "'" + key + "' is not supported by /v1/tokenize with 'messages'");
      }
      chat[key] = value;
    }
    auto parsed = ParseCompletionRequest(chat, Endpoint::kChat);
    if (auto* p = std::get_if<CompletionParams>(&parsed)) p->return_token_strs = strs;
    return parsed;
  }
  CompletionParams p;
  for (const auto& [key, value] : body.items())
    if (key != "prompt" && key != "add_special_tokens" && key != "model" &&
        key != "return_token_strs" && !value.is_null())
      return Bad(key, "'" + key + "' is not supported by /v1/tokenize");
  if (!body.contains("prompt") || !body["prompt"].is_string())
    return Bad("prompt", "/v1/tokenize needs a string 'prompt' or 'messages'");
  p.prompt_text = body["prompt"].get<std::string>();
  if (auto e = Bool(body, "add_special_tokens", &p.add_special_tokens)) return *e;
  p.return_token_strs = strs;
  return p;
}

}  // namespace epserve::serve
