// Reading JSON that comes from outside (config.json, placements, traces, planner inputs,
// tokenizer files) with one-line errors that say where it broke, never the JSON library's own
// "[json.exception.parse_error.101] ..." text:
//   "config.json: invalid JSON at line 3, column 17: syntax error while parsing object key - ..."
//   "p.json: missing key \"topology\""
// Every parser of outside JSON goes through these, so the messages look the same everywhere.
// Stateless free functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace epserve {

// Parses `text`; `name` (a file name, or "file:line" for one line of a JSONL file) prefixes
// errors. Malformed text: DataLoss "<name>: invalid JSON at line L, column C: <reason>", with L
// and C (1-based) of the byte where the parser stopped; a single-line text (a JSONL row) gives
// "<name>: invalid JSON at column C: <reason>".
StatusOr<nlohmann::json> ParseJson(std::string_view text, const std::string& name);
StatusOr<nlohmann::ordered_json> ParseOrderedJson(std::string_view text, const std::string& name);
// How deep `text` nests arrays and objects (0 for a scalar), counted without recursion and without
// parsing: brackets inside strings (with their escapes) do not count. Stops counting once `limit`
// is passed and returns limit + 1, so a hostile body costs one bounded pass. Text that is not
// JSON gets some number; the parser reports it.
int JsonNestingDepth(std::string_view text, int limit);
// The deepest nesting ParseJson/ParseOrderedJson accept: deeper text is DataLoss "<name>: JSON
// nested deeper than 512 levels". Every walk over parsed values (copies, dumps, conversions) is
// recursive, so unbounded depth is a stack overflow waiting for an input.
inline constexpr int kMaxJsonDepth = 512;

// Reads the file at `path` and parses it; errors are prefixed with the path ("x.json: cannot
// open: No such file or directory" is NotFound).
StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);

// The one-line description of an exception of the JSON library (without its
// "[json.exception.x.y] " prefix), for the few places that still catch them.
std::string JsonExceptionText(const nlohmann::json::exception& e);

// Field `key` of the object `obj`. `where` names obj ("p.json", "p.json: layers[2]"): a missing
// key is DataLoss "<where>: missing key \"<key>\"", a non-object "<where>: expected an object,
// got <type>". The pointer lives as long as `obj`.
StatusOr<const nlohmann::json*> JsonField(const nlohmann::json& obj, const char* key,
                                          const std::string& where);

}  // namespace epserve
