// DeepSeek-V3.2's prompt format. V3.2 ships no Jinja chat template: its Hugging Face repository
// has encoding/encoding_dsv32.py instead, whose encode_messages this renders (our own code,
// checked against samples derived from that script; see dsv32_prompt_test.cc):
//   <｜begin▁of▁sentence｜>SYSTEM[\n\n## Tools ... <functions>\nSCHEMA\n...</functions>\n]
//   <｜User｜>USER<｜Assistant｜></think>       (chat mode, or any user turn but the last)
//   <｜User｜>USER<｜Assistant｜><think>        (thinking mode, the last user turn)
//   [REASONING</think>]CONTENT[\n\n<｜DSML｜function_calls>...]<｜end▁of▁sentence｜>
//   \n\n<function_results>\n<result>TOOL</result>...\n</function_results>\n\n</think>|<think>
// A request's tools go with the first message when it is a system message, else with a system
// message of empty content put first (as vLLM's DeepSeek-V3.2 tokenizer does). An assistant
// turn's reasoning_content is rendered only after the last user turn, in thinking mode.
// Differences from the script: null or missing content renders as "" (Python would write
// "None"); a list of content parts renders as the concatenation of its text parts; an
// assistant turn after the last user turn without reasoning or tool calls is allowed.
// Thread safety: a pure function.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace epserve::serve {

enum class DeepSeekV32Mode { kChat, kThinking };

// messages: OpenAI chat messages; tools: the request's "tools" (null or [] for none). Errors
// (a tool message without an assistant tool call before it, arguments that are not a JSON
// object, an unknown role) are the request's fault.
StatusOr<std::string> RenderDeepSeekV32Prompt(const nlohmann::ordered_json& messages,
                                              const nlohmann::ordered_json& tools,
                                              DeepSeekV32Mode mode);

}  // namespace epserve::serve
