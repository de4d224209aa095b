// DeepSeek-V4's prompt format. V4 ships no Jinja chat template: its Hugging Face repositories
// have encoding/encoding_dsv4.py, whose encode_messages this renders (our own code, checked
// against that script's output for the requests of tests/serve/dsv4_prompt_cases.json):
//   <｜begin▁of▁sentence｜>[REASONING_EFFORT_MAX]SYSTEM[\n\n## Tools ...SCHEMAS...]
//     [\n\n## Response Format: ...SCHEMA]
//   <｜User｜>USER<｜Assistant｜></think>      chat mode
//   <｜User｜>USER<｜Assistant｜><think>       thinking mode: the last user turn, or every
//                                            user turn when the request has tools
//   [REASONING</think>]CONTENT[\n\n<｜DSML｜tool_calls>...</｜DSML｜tool_calls>]
//     <｜end▁of▁sentence｜>
//   <｜User｜><tool_result>RESULT</tool_result>\n\n<tool_result>...</tool_result>[\n\nUSER]
// Tool results are user turns (consecutive tool and user messages merge into one, "\n\n"
// between), put in the order of the assistant's calls (by tool_call_id). In thinking mode
// without tools, the reasoning of assistant turns before the last user turn is dropped, and
// so are developer messages there. <｜latest_reminder｜> messages (role "latest_reminder") and
// developer turns (rendered as user turns) are the script's. The request's tools and a
// json_schema response_format's schema go on the first message when it is a system message,
// else on a system message of empty content put first.
// Differences from the script: a list of content parts renders as the concatenation of its
// text parts; an assistant turn's reasoning is "reasoning_content" (or vLLM's "reasoning");
// the script's internal task tokens (a message's "task") are not rendered.
// Thread safety: a pure function.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace epserve::serve {

struct DeepSeekV4PromptOptions {
  bool thinking = false;
  bool reasoning_effort_max = false;  // the script's reasoning_effort "max" (thinking mode only)
};

// Whether a chat request asks for thinking: chat_template_kwargs "thinking" or
// "enable_thinking" when one is a boolean, else a reasoning_effort other than "none" ("": not
// given). Every model's chat prompt and output parsing use this rule.
bool ThinkingRequested(const nlohmann::ordered_json& template_kwargs,
                       std::string_view reasoning_effort);
// The options of a request: thinking as ThinkingRequested; reasoning_effort "max" or "xhigh" is
// the script's "max" (the script knows only "max", "high" and none: the others add nothing).
DeepSeekV4PromptOptions DeepSeekV4OptionsFor(const nlohmann::ordered_json& template_kwargs,
                                             std::string_view reasoning_effort);

// messages: OpenAI chat messages; tools: the request's "tools" (null or [] for none);
// response_schema: a json_schema response_format's schema (null for none). Errors (an unknown
// role, a developer message without content, arguments that are not a JSON object) are the
// request's fault.
StatusOr<std::string> RenderDeepSeekV4Prompt(const nlohmann::ordered_json& messages,
                                             const nlohmann::ordered_json& tools,
                                             const nlohmann::ordered_json& response_schema,
                                             const DeepSeekV4PromptOptions& options);

}  // namespace epserve::serve
