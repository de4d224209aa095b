// Parsing and validation of OpenAI /v1/completions and /v1/chat/completions request bodies.
// Every error names the offending parameter and carries the HTTP status it maps to, so a bad
// request is answered, never aborted on.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "runtime/logits_processor.h"

namespace epserve::serve {

// An OpenAI-style error: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string param;  // empty: null
  std::string code;   // empty: null
  std::string type = "invalid_request_error";
  nlohmann::json Body() const;
};

enum class Endpoint { kCompletions, kChat };

// tool_choice: "auto" (the model decides), "none" (tool-call tokens cannot be drawn),
// "required" (the output is tool calls, enforced by a grammar), or one named function.
enum class ToolChoice { kAuto, kNone, kRequired, kNamed };
// response_format: text, any JSON object, or JSON matching a schema (grammar-constrained).
enum class ResponseFormat { kText, kJsonObject, kJsonSchema };

struct CompletionParams {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;  // empty: not given
  // Completions: prompt text, or token ids. Chat: the messages (rendered by the server).
  std::optional<std::string> prompt_text;
  std::vector<int32_t> prompt_ids;
  nlohmann::ordered_json messages;
  int max_tokens = 16;  // completions' default (OpenAI's); chat: see kDefaultChatMaxTokens
  bool max_tokens_set = false;
  float temperature = 1.0f, top_p = 1.0f;
  int top_k = 0;  // 0: all
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  int logprobs = -1;  // -1: none; N >= 0: the sampled token's and the top N
  bool stream = false, include_usage = false;
  bool ignore_eos = false;        // vLLM's extension
  bool return_token_ids = false;  // vLLM's extension: choices carry "token_ids"
  int n = 1;  // choices, each its own engine request (seeds seed, seed + 1, ...)
  float min_p = 0.0f;
  LogitsAdjustments adjust;       // logit_bias, penalties, min_tokens
  bool continuous_usage = false;  // stream_options.continuous_usage_stats: usage on every chunk
  // Chat only.
  nlohmann::ordered_json tools;  // the request's "tools" as given (null: none)
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_name;  // kNamed
  bool parallel_tool_calls = true;
  ResponseFormat response_format = ResponseFormat::kText;
  nlohmann::ordered_json json_schema;  // kJsonSchema: the schema
  nlohmann::ordered_json template_kwargs =
      nlohmann::ordered_json::object();  // chat_template_kwargs
  // "" (not given), or none, minimal, low, medium, high, xhigh, max: asks for thinking unless
  // chat_template_kwargs says (serve/dsv4_prompt.h's ThinkingRequested); DeepSeek-V4 renders
  // max and xhigh as its maximum effort; templates get it as `reasoning_effort`.
  std::string reasoning_effort;
  bool add_generation_prompt = true;
  bool continue_final_message = false;  // the last (assistant) message is continued, not closed
  bool add_special_tokens = true;       // completions prompt text: BOS as the tokenizer adds it
  bool return_token_strs = false;       // /v1/tokenize only: the answer lists the tokens' strings
};

// A chat request without max_tokens may generate up to the rest of the model's context, at
// most this many tokens (OpenAI's chat default is unbounded; a bound keeps one request from
// claiming a whole cache pool).
constexpr int kDefaultChatMaxTokens = 4096;

// Largest n accepted: each choice is a request in the engines.
constexpr int kMaxChoices = 16;

// An answer's size in "output units": n x max_tokens x (1 + top logprobs), each unit one token
// or one of its top logprobs (a whole answer's JSON: ~70 bytes per unit for chat, ~25 for
// completions, a few per token without logprobs). serve --max-output-units bounds it per request
// (docs/serving-api.md, "Security and limits"); this default lets n 1 x 32,768 tokens x 20 top
// logprobs (688,128 units), n 16 x 4,000 x 20 (1,344,000) and n 16 x 131,072 tokens without
// logprobs through, and bounds a chat answer at ~150 MB.
constexpr int64_t kDefaultMaxOutputUnits = int64_t{1} << 21;
int64_t OutputUnits(const CompletionParams& params);
// A 400 naming max_tokens when params' answer may exceed `max_units` (0: no bound).
std::optional<ApiError> CheckOutputUnits(const CompletionParams& params, int64_t max_units);

// The sampling values a request that sets none of its own gets: OpenAI's (below), or the
// checkpoint's generation_config.json (serve --generation-config; model/generation_config.h).
// A request's own value always wins; a null counts as not set.
struct SamplingDefaults {
  float temperature = 1.0f, top_p = 1.0f;
  int top_k = 0;  // 0: all
};

// `body` is the parsed JSON request.
std::variant<CompletionParams, ApiError> ParseCompletionRequest(
    const nlohmann::ordered_json& body, Endpoint endpoint, const SamplingDefaults& defaults = {});

// /v1/tokenize: {"prompt": text, "add_special_tokens": bool} or {"messages": [...]} with the
// chat fields that shape the rendering (tools, chat_template_kwargs, add_generation_prompt,
// reasoning_effort, continue_final_message); "model" and "return_token_strs" (a boolean) are
// allowed too.
std::variant<CompletionParams, ApiError> ParseTokenizeRequest(const nlohmann::ordered_json& body);

}  // namespace epserve::serve
