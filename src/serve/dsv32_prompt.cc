#include "serve/dsv32_prompt.h"

#include <string_view>

#include "serve/dsml_render.h"

namespace epserve::serve {
namespace {

using Json = nlohmann::ordered_json;

// encoding_dsv32.py's TOOLS_SYSTEM_TEMPLATE with its tokens filled in; the schemas follow.
constexpr std::string_view kToolsHead =
    "## Tools\n\n"
    "You have access to a set of tools you can use to answer the user's question.\n"
    "You can invoke functions by writing a \"<｜DSML｜function_calls>\" block like the "
    "following as part of your reply to the user:\n"
    "<｜DSML｜function_calls>\n"
    "<｜DSML｜invoke name=\"$FUNCTION_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE"
    "</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$FUNCTION_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜function_calls>\n\n"
    "String and scalar parameters should be specified as is without any escaping or quotes, "
    "while lists and objects should use JSON format. The \"string\" attribute should be set to "
    "\"true\" for string type parameters and \"false\" for other types (numbers, booleans, "
    "arrays, objects).\n\n"
    "If the thinking_mode is enabled, then after function results you should strongly consider "
    "outputting a thinking block. Here is an example:\n\n"
    "<｜DSML｜function_calls>\n...\n</｜DSML｜function_calls>\n\n"
    "<function_results>\n...\n</function_results>\n\n"
    "<think>...thinking about results</think>\n\n"
    "Here are the functions available in JSONSchema format:\n"
    "<functions>\n";
constexpr std::string_view kToolsTail = "\n</functions>\n";

}  // namespace

StatusOr<std::string> RenderDeepSeekV32Prompt(const Json& messages_in, const Json& tools,
                                              DeepSeekV32Mode mode) {
  if (!messages_in.is_array()) return Status::InvalidArgument("messages must be an array");
  Json messages = messages_in;
  const bool has_tools = tools.is_array() && !tools.empty();
  if (has_tools && (messages.empty() || MessageRole(messages[0]) != "system"))
    messages.insert(messages.begin(), Json{{"role", "system"}, {"content", ""}});
  const bool thinking = mode == DeepSeekV32Mode::kThinking;
  int64_t last_user = -1;
  for (size_t i = 0; i < messages.size(); ++i)
    if (MessageRole(messages[i]) == "user" || MessageRole(messages[i]) == "developer")
      last_user = static_cast<int64_t>(i);
  // The think token that follows a user turn (or a round of tool results) at index i.
  auto think_after = [&](int64_t i, bool at_or_after) {
    const bool open = thinking && (at_or_after ? i >= last_user : i == last_user);
    return open ? kThinkOpenText : kThinkCloseText;
  };

  std::string out(kDeepSeekBos);
  for (size_t idx = 0; idx < messages.size(); ++idx) {
    const Json& m = messages[idx];
    const int64_t i = static_cast<int64_t>(idx);
    const std::string role = MessageRole(m);
    const std::string content = MessageText(m);
    if (role == "system") {
      out += content;
      if (has_tools && idx == 0) {
        ASSIGN_OR_RETURN(std::string rendered, RenderToolSchemas(tools, kToolsHead, kToolsTail));
        out += "\n\n" + rendered;
      }
    } else if (role == "user" || role == "developer") {
      // The script's developer turn is "\n\n# The user's message is: " + content (with its own
      // tools, which requests do not have).
      out += kDeepSeekUser;
      out += role == "developer" ? "\n\n# The user's message is: " + content : content;
      out += kDeepSeekAssistant;
      out += think_after(i, /*at_or_after=*/false);
    } else if (role == "tool") {
      int64_t prev = i - 1;
      while (prev >= 0 && MessageRole(messages[prev]) == "tool") --prev;
      if (prev < 0 || MessageRole(messages[prev]) != "assistant" || !HasToolCalls(messages[prev]) ||
          messages[prev]["tool_calls"].size() < static_cast<size_t>(i - prev))
        return Status::InvalidArgument("messages[" + std::to_string(idx) +
                                       "]: a tool result without its assistant tool call");
      const size_t order = static_cast<size_t>(i - prev);  // 1 for the first result
      if (order == 1) out += "\n\n<function_results>";
      out += "\n<result>" + content + "</result>";
      if (order == messages[prev]["tool_calls"].size()) {
        out += "\n</function_results>\n\n";
        out += think_after(i, /*at_or_after=*/true);
      }
    } else if (role == "assistant") {
      if (thinking && i > last_user) {
        if (m.contains("reasoning_content") && m["reasoning_content"].is_string())
          out += m["reasoning_content"].get<std::string>();
        out += kThinkCloseText;
      }
      out += content;
      if (HasToolCalls(m)) {
        ASSIGN_OR_RETURN(std::string calls,
                         RenderDsmlToolCalls(m["tool_calls"], idx, "function_calls"));
        out += calls;
      }
      out += kDeepSeekEos;
    } else {
      return Status::InvalidArgument("messages[" + std::to_string(idx) + "]: unknown role \"" +
                                     role + "\"");
    }
  }
  return out;
}

}  // namespace epserve::serve
