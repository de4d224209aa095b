// What DeepSeek-V3.2's and DeepSeek-V4's prompt encoders (dsv32_prompt.h, dsv4_prompt.h) share:
// the chat tokens, Python's json.dumps for schemas and non-string arguments, a message's role and
// text, the tools section, and the DSML block an assistant turn's tool calls become:
//   \n\n<｜DSML｜BLOCK>\n<｜DSML｜invoke name="NAME">\n
//   <｜DSML｜parameter name="KEY" string="true|false">VALUE</｜DSML｜parameter>  (joined by "\n")
//   \n</｜DSML｜invoke>  (invokes joined by "\n")  \n</｜DSML｜BLOCK>
// with BLOCK "function_calls" (V3.2) or "tool_calls" (V4); a string value is written as is
// (string="true"), any other as JSON (string="false").
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace epserve::serve {

inline constexpr std::string_view kDeepSeekBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kDeepSeekEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kDeepSeekUser = "<｜User｜>";
inline constexpr std::string_view kDeepSeekAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kThinkOpenText = "<think>";
inline constexpr std::string_view kThinkCloseText = "</think>";

// Python's json.dumps(value, ensure_ascii=False), as the encoders' to_json.
StatusOr<std::string> PyJsonDumps(const nlohmann::ordered_json& value);
// The message's "role" ("" when missing or not a string).
std::string MessageRole(const nlohmann::ordered_json& message);
// The message's text: a string, the concatenated text parts of a list, or "" (null, missing).
std::string MessageText(const nlohmann::ordered_json& message);
bool HasToolCalls(const nlohmann::ordered_json& message);
// An OpenAI tool's schema as the encoders list it: its "function" object (or the tool itself).
const nlohmann::ordered_json& ToolFunction(const nlohmann::ordered_json& tool);
// head + each tool's schema (ToolFunction) as Python JSON, one a line + tail.
StatusOr<std::string> RenderToolSchemas(const nlohmann::ordered_json& tools, std::string_view head,
                                        std::string_view tail);
// `calls` is messages[index].tool_calls (OpenAI form: {"function": {"name", "arguments"}},
// arguments a JSON object or its text). Errors (no name, arguments not an object) name the call.
StatusOr<std::string> RenderDsmlToolCalls(const nlohmann::ordered_json& calls, size_t index,
                                          std::string_view block);

}  // namespace epserve::serve
