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

struct CompletionParams {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;  // empty: not given
  // Completions: prompt text, or token ids. Chat: the messages (rendered by the server).
  std::optional<std::string> prompt_text;
  std::vector<int32_t> prompt_ids;
  nlohmann::ordered_json messages;
  int max_tokens = 16;
  float temperature = 1.0f, top_p = 1.0f;
  int top_k = 0;  // 0: all
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  int logprobs = -1;  // -1: none; N >= 0: the sampled token's and the top N
  bool stream = false, include_usage = false;
  bool ignore_eos = false;        // vLLM's extension
  bool return_token_ids = false;  // vLLM's extension: choices carry "token_ids"
};

// `body` is the parsed JSON request.
std::variant<CompletionParams, ApiError> ParseCompletionRequest(const nlohmann::ordered_json& body,
                                                                Endpoint endpoint);

}  // namespace epserve::serve
