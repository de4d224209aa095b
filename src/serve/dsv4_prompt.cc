#include "serve/dsv4_prompt.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <vector>

#include "serve/dsml_render.h"

namespace epserve::serve {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";

constexpr std::string_view kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate "
    "step, considered alternative, and rejected hypothesis to ensure absolutely no assumption "
    "is left unchecked.\n\n";

// encoding_dsv4.py's TOOLS_TEMPLATE with its tokens filled in, around {tool_schemas}.
constexpr std::string_view kV4ToolsHead =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke "
    "tools by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE"
    "</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other "
    "types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete "
    "reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
constexpr std::string_view kV4ToolsTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
    "tool calls.\n";
constexpr std::string_view kResponseFormatHead =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// A user turn's parts after the merge of tool messages: text, or a tool result.
struct Block {
  bool tool_result = false;
  std::string text;
  std::string tool_call_id;
};

// A message as the script's render_message sees it.
struct Turn {
  std::string role;
  std::string content;               // system, developer, latest_reminder, assistant
  std::vector<Block> blocks;         // user
  const Json* tool_calls = nullptr;  // assistant, when it has any
  size_t source = 0;                 // the index in the request's messages (for errors)
  std::string reasoning;
  bool tools = false, schema = false;  // carries the request's tools / response schema
};

// A tool message's content: a string, or its parts' texts joined by "\n\n" (another part is
// "[Unsupported TYPE]"), as the script's tool_result rendering.
std::string ToolResultText(const Json& m) {
  if (!m.contains("content") || !m["content"].is_array()) return MessageText(m);
  std::string out;
  bool first = true;
  for (const Json& part : m["content"]) {
    if (!first) out += "\n\n";
    first = false;
    const std::string type = part.is_object() && part.contains("type") && part["type"].is_string()
                                 ? part["type"].get<std::string>()
                                 : "";
    if (type == "text" && part.contains("text") && part["text"].is_string())
      out += part["text"].get<std::string>();
    else
      out += "[Unsupported " + type + "]";
  }
  return out;
}

std::string Reasoning(const Json& m) {
  for (const char* key : {"reasoning_content", "reasoning"})
    if (m.contains(key) && m[key].is_string()) return m[key].get<std::string>();
  return "";
}

// merge_tool_messages: tool results and user texts that follow a user turn join it.
std::vector<Turn> MergeTurns(const Json& messages) {
  std::vector<Turn> turns;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    Turn t{.role = MessageRole(m), .source = i};
    if (t.role == "tool" || t.role == "user") {
      Block b{.tool_result = t.role == "tool"};
      b.text = b.tool_result ? ToolResultText(m) : MessageText(m);
      if (b.tool_result && m.contains("tool_call_id") && m["tool_call_id"].is_string())
        b.tool_call_id = m["tool_call_id"].get<std::string>();
      if (!turns.empty() && turns.back().role == "user") {
        turns.back().blocks.push_back(std::move(b));
        continue;
      }
      t.role = "user";
      t.blocks.push_back(std::move(b));
    } else {
      t.content = MessageText(m);
      t.reasoning = Reasoning(m);
      if (HasToolCalls(m)) t.tool_calls = &m["tool_calls"];
    }
    turns.push_back(std::move(t));
  }
  return turns;
}

// sort_tool_results_by_call_order: a user turn's results in the order of the latest assistant
// turn's calls (results of unknown ids sort as the first call); a stable sort.
void SortToolResults(std::vector<Turn>& turns) {
  std::map<std::string, size_t> order;
  for (Turn& t : turns) {
    if (t.role == "assistant" && t.tool_calls != nullptr) {
      order.clear();
      for (size_t i = 0; i < t.tool_calls->size(); ++i) {
        const Json& c = (*t.tool_calls)[i];
        std::string id;
        if (c.contains("id") && c["id"].is_string()) id = c["id"].get<std::string>();
        if (id.empty() && c.contains("function") && c["function"].contains("id") &&
            c["function"]["id"].is_string())
          id = c["function"]["id"].get<std::string>();
        if (!id.empty()) order[id] = i;
      }
    } else if (t.role == "user" && !order.empty()) {
      std::vector<Block> results;
      for (const Block& b : t.blocks)
        if (b.tool_result) results.push_back(b);
      if (results.size() < 2) continue;
      auto rank = [&](const Block& b) {
        auto it = order.find(b.tool_call_id);
        return it == order.end() ? size_t{0} : it->second;
      };
      std::stable_sort(results.begin(), results.end(),
                       [&](const Block& a, const Block& b) { return rank(a) < rank(b); });
      size_t next = 0;
      for (Block& b : t.blocks)
        if (b.tool_result) b = results[next++];
    }
  }
}

int64_t LastUser(const std::vector<Turn>& turns) {
  for (int64_t i = static_cast<int64_t>(turns.size()) - 1; i >= 0; --i)
    if (turns[i].role == "user" || turns[i].role == "developer") return i;
  return -1;
}

// _drop_thinking_messages: before the last user turn, assistant turns lose their reasoning and
// developer turns go.
std::vector<Turn> DropThinking(std::vector<Turn> turns) {
  const int64_t last_user = LastUser(turns);
  std::vector<Turn> kept;
  for (int64_t i = 0; i < static_cast<int64_t>(turns.size()); ++i) {
    Turn& t = turns[i];
    const bool keep =
        t.role == "user" || t.role == "system" || t.role == "latest_reminder" || i >= last_user;
    if (keep) {
      kept.push_back(std::move(t));
    } else if (t.role == "assistant") {
      t.reasoning.clear();
      kept.push_back(std::move(t));
    }
  }
  return kept;
}

}  // namespace

bool ThinkingRequested(const Json& template_kwargs, std::string_view reasoning_effort) {
  for (const char* key : {"thinking", "enable_thinking"})
    if (template_kwargs.contains(key) && template_kwargs[key].is_boolean())
      return template_kwargs[key].get<bool>();
  return !reasoning_effort.empty() && reasoning_effort != "none";
}

DeepSeekV4PromptOptions DeepSeekV4OptionsFor(const Json& template_kwargs,
                                             std::string_view reasoning_effort) {
  return {.thinking = ThinkingRequested(template_kwargs, reasoning_effort),
          .reasoning_effort_max = reasoning_effort == "max" || reasoning_effort == "xhigh"};
}

StatusOr<std::string> RenderDeepSeekV4Prompt(const Json& messages, const Json& tools,
                                             const Json& response_schema,
                                             const DeepSeekV4PromptOptions& options) {
  if (!messages.is_array()) return Status::InvalidArgument("messages must be an array");
  std::vector<Turn> turns = MergeTurns(messages);
  const bool has_tools = tools.is_array() && !tools.empty();
  const bool has_schema = !response_schema.is_null();
  if (has_tools || has_schema) {
    if (turns.empty() || turns[0].role != "system")
      turns.insert(turns.begin(), Turn{.role = "system"});
    turns[0].tools = has_tools;
    turns[0].schema = has_schema;
  }
  SortToolResults(turns);
  // With tools, every turn keeps its reasoning (the script turns drop_thinking off).
  const bool drop = !has_tools;
  const bool thinking = options.thinking;
  if (thinking && drop) turns = DropThinking(std::move(turns));
  const int64_t last_user = LastUser(turns);

  std::string out(kDeepSeekBos);
  for (int64_t i = 0; i < static_cast<int64_t>(turns.size()); ++i) {
    const Turn& t = turns[i];
    if (i == 0 && thinking && options.reasoning_effort_max) out += kReasoningEffortMax;
    const std::string where = "messages[" + std::to_string(t.source) + "]";
    std::string extras;  // the request's tools and response schema
    if (t.tools) {
      ASSIGN_OR_RETURN(std::string rendered, RenderToolSchemas(tools, kV4ToolsHead, kV4ToolsTail));
      extras += "\n\n" + rendered;
    }
    if (t.schema) {
      ASSIGN_OR_RETURN(std::string schema, PyJsonDumps(response_schema));
      extras += "\n\n" + std::string(kResponseFormatHead) + schema;
    }
    if (t.role == "system") {
      out += t.content + extras;
    } else if (t.role == "developer") {
      if (t.content.empty())
        return Status::InvalidArgument(where + ": a developer message needs content");
      out += std::string(kDeepSeekUser) + t.content + extras;
    } else if (t.role == "user") {
      out += kDeepSeekUser;
      for (size_t b = 0; b < t.blocks.size(); ++b) {
        if (b > 0) out += "\n\n";
        const Block& block = t.blocks[b];
        out += block.tool_result ? "<tool_result>" + block.text + "</tool_result>" : block.text;
      }
    } else if (t.role == "latest_reminder") {
      out += std::string(kLatestReminder) + t.content;
    } else if (t.role == "assistant") {
      if (thinking && (!drop || i > last_user)) out += t.reasoning + std::string(kThinkCloseText);
      out += t.content;
      if (t.tool_calls != nullptr) {
        ASSIGN_OR_RETURN(std::string calls,
                         RenderDsmlToolCalls(*t.tool_calls, t.source, "tool_calls"));
        out += calls;
      }
      out += kDeepSeekEos;
    } else {
      return Status::InvalidArgument(where + ": unknown role \"" + t.role + "\"");
    }
    // After a user turn that the assistant answers next (or the last one): the assistant's
    // turn opens, thinking or not.
    const bool next_answers = i + 1 == static_cast<int64_t>(turns.size()) ||
                              turns[i + 1].role == "assistant" ||
                              turns[i + 1].role == "latest_reminder";
    if (next_answers && (t.role == "user" || t.role == "developer")) {
      out += kDeepSeekAssistant;
      out += thinking && (!drop || i >= last_user) ? kThinkOpenText : kThinkCloseText;
    }
  }
  return out;
}

}  // namespace epserve::serve
