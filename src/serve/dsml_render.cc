#include "serve/dsml_render.h"

#include "text/jinja_value.h"

namespace epserve::serve {

using Json = nlohmann::ordered_json;

StatusOr<std::string> PyJsonDumps(const Json& value) {
  return text::jinja::JsonDumps(text::jinja::Value::FromJson(value), {});
}

std::string MessageRole(const Json& m) {
  return m.contains("role") && m["role"].is_string() ? m["role"].get<std::string>() : "";
}

std::string MessageText(const Json& m) {
  if (!m.contains("content")) return "";
  const Json& c = m["content"];
  if (c.is_string()) return c.get<std::string>();
  std::string out;
  if (c.is_array())
    for (const Json& part : c)
      if (part.is_object() && part.contains("text") && part["text"].is_string())
        out += part["text"].get<std::string>();
  return out;
}

bool HasToolCalls(const Json& m) {
  return m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty();
}

const Json& ToolFunction(const Json& tool) {
  return tool.is_object() && tool.contains("function") ? tool["function"] : tool;
}

StatusOr<std::string> RenderToolSchemas(const Json& tools, std::string_view head,
                                        std::string_view tail) {
  std::string out(head);
  for (size_t i = 0; i < tools.size(); ++i) {
    ASSIGN_OR_RETURN(std::string schema, PyJsonDumps(ToolFunction(tools[i])));
    if (i > 0) out += '\n';
    out += schema;
  }
  out += tail;
  return out;
}

StatusOr<std::string> RenderDsmlToolCalls(const Json& calls, size_t index, std::string_view block) {
  const std::string dsml = "｜DSML｜";
  std::string out = "\n\n<" + dsml + std::string(block) + ">\n";
  for (size_t i = 0; i < calls.size(); ++i) {
    const Json& f = calls[i].contains("function") ? calls[i]["function"] : calls[i];
    const std::string where =
        "messages[" + std::to_string(index) + "].tool_calls[" + std::to_string(i) + "]";
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string())
      return Status::InvalidArgument(where + ": a tool call needs function.name");
    Json args = f.contains("arguments") ? f["arguments"] : Json::object();
    if (args.is_string()) args = Json::parse(args.get<std::string>(), nullptr, false);
    if (args.is_null()) args = Json::object();
    if (!args.is_object())
      return Status::InvalidArgument(where + ": function.arguments must be a JSON object");
    if (i > 0) out += '\n';
    out += "<" + dsml + "invoke name=\"" + f["name"].get<std::string>() + "\">\n";
    bool first = true;
    for (const auto& [key, value] : args.items()) {
      if (!first) out += '\n';
      first = false;
      out += "<" + dsml + "parameter name=\"" + key + "\" string=\"";
      if (value.is_string()) {
        out += "true\">" + value.get<std::string>();
      } else {
        ASSIGN_OR_RETURN(std::string v, PyJsonDumps(value));
        out += "false\">" + v;
      }
      out += "</" + dsml + "parameter>";
    }
    out += "\n</" + dsml + "invoke>";
  }
  out += "\n</" + dsml + std::string(block) + ">";
  return out;
}

}  // namespace epserve::serve
