// Reading the tokenizer's JSON files with one-line errors that name the file and the place:
// "tokenizer.json: invalid JSON at line 3, column 17: syntax error ..." for malformed JSON and
// "tokenizer.json: model.merges[12]: expected a string" for a wrong type.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/json.h"
#include "base/status.h"

namespace epserve::text {

// Parsing itself (ParseJson, ReadJsonFile: "tokenizer.json: invalid JSON at line 3, column
// 17: ...") is base/json.h's, shared with every other reader of outside JSON.

// Typed field access; `where` is the path of `obj` ("tokenizer.json: model"), errors append the
// key. Missing or null keys give `fallback`.
StatusOr<std::string> GetString(const nlohmann::json& obj, const char* key,
                                const std::string& where, std::string fallback = "");
StatusOr<bool> GetBool(const nlohmann::json& obj, const char* key, const std::string& where,
                       bool fallback);
StatusOr<int64_t> GetInt(const nlohmann::json& obj, const char* key, const std::string& where,
                         int64_t fallback);

// "tokenizer.json: model" + "vocab" -> "tokenizer.json: model.vocab"; "x/tokenizer_config.json" +
// "bos_token"
// -> "x/tokenizer_config.json: bos_token".
std::string JoinPath(const std::string& where, const char* key);

// "<where>: expected <what>, got <type>".
Status TypeError(const std::string& where, const char* what, const nlohmann::json& got);

// The "type" string of a component object, or an error naming `where`.
StatusOr<std::string> ComponentType(const nlohmann::json& obj, const std::string& where);
Status Unsupported(const std::string& where, const std::string& type);

}  // namespace epserve::text
