#include "grammar/tool_calls.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/builder.h"

namespace epserve::grammar {
namespace {

using Json = nlohmann::ordered_json;
using Expr = GrammarBuilder::Expr;

// A set of byte strings of one length: one byte range per position.
using RangeSeq = std::vector<std::pair<int, int>>;

// Every valid UTF-8 character (RFC 3629's table).
std::vector<RangeSeq> Utf8Chars() {
  const std::pair<int, int> cont{0x80, 0xBF};
  return {{{0x00, 0x7F}},
          {{0xC2, 0xDF}, cont},
          {{0xE0, 0xE0}, {0xA0, 0xBF}, cont},
          {{0xE1, 0xEC}, cont, cont},
          {{0xED, 0xED}, {0x80, 0x9F}, cont},
          {{0xEE, 0xEF}, cont, cont},
          {{0xF0, 0xF0}, {0x90, 0xBF}, cont, cont},
          {{0xF1, 0xF3}, cont, cont, cont},
          {{0xF4, 0xF4}, {0x80, 0x8F}, cont, cont}};
}

// `sets` less the one byte string `s`: a set holding s splits at each position into the
// strings agreeing with s before it and differing at it.
std::vector<RangeSeq> Without(const std::vector<RangeSeq>& sets, std::string_view s) {
  std::vector<RangeSeq> out;
  for (const RangeSeq& seq : sets) {
    bool holds = seq.size() == s.size();
    for (size_t i = 0; holds && i < s.size(); ++i) {
      const int c = static_cast<uint8_t>(s[i]);
      holds = seq[i].first <= c && c <= seq[i].second;
    }
    if (!holds) {
      out.push_back(seq);
      continue;
    }
    for (size_t i = 0; i < s.size(); ++i) {
      const int c = static_cast<uint8_t>(s[i]);
      for (const std::pair<int, int>& part :
           {std::pair{seq[i].first, c - 1}, std::pair{c + 1, seq[i].second}}) {
        if (part.first > part.second) continue;
        RangeSeq r;
        for (size_t j = 0; j < i; ++j) r.push_back({static_cast<uint8_t>(s[j]), s[j] & 0xFF});
        r.push_back(part);
        r.insert(r.end(), seq.begin() + static_cast<std::ptrdiff_t>(i) + 1, seq.end());
        out.push_back(std::move(r));
      }
    }
  }
  return out;
}

// One UTF-8 character other than those listed (each one character's bytes).
Expr CharExcept(GrammarBuilder& b, const std::vector<std::string_view>& excluded) {
  std::vector<RangeSeq> sets = Utf8Chars();
  for (std::string_view e : excluded) sets = Without(sets, e);
  std::vector<Expr> alternatives;
  for (const RangeSeq& seq : sets) {
    std::vector<Expr> bytes;
    for (const auto& [lo, hi] : seq)
      bytes.push_back(b.ByteRange(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)));
    alternatives.push_back(b.Seq(std::move(bytes)));
  }
  return b.Alt(std::move(alternatives));
}

// The UTF-8 characters of `s`, each as its bytes.
std::vector<std::string_view> Chars(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    const auto lead = static_cast<uint8_t>(s[i]);
    const size_t n = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

// Any UTF-8 text that does not contain `end`, whose first character appears nowhere else in it
// (so no occurrence of `end` can straddle the text and the `end` that follows). Split at each
// occurrence of that character c: text = N* (c S)*, N a character other than c, S a run of
// N that does not start with the rest R of `end`: a proper prefix of R, or R[:k], a character
// other than R[k] and c, then any N.
Expr TextWithout(GrammarBuilder& b, std::string_view end) {
  const std::vector<std::string_view> chars = Chars(end);
  const std::string_view c = chars[0];
  const Expr n = CharExcept(b, {c});
  std::vector<Expr> segment;
  std::string prefix;
  for (size_t k = 1; k < chars.size(); ++k) {
    const Expr p = b.Literal(prefix);
    segment.push_back(p);  // a proper prefix of R, then the next c or the end
    segment.push_back(b.Seq({p, CharExcept(b, {chars[k], c}), b.Star(n)}));
    prefix += chars[k];
  }
  return b.Seq({b.Star(n), b.Star(b.Seq({b.Literal(c), b.Alt(std::move(segment))}))});
}

constexpr std::string_view kParamEnd = "</｜DSML｜parameter>";

// Whether a property's schema is a plain string, written raw (string="true").
bool PlainString(const Json& schema) {
  if (!schema.is_object() || schema.value("type", Json()) != "string") return false;
  for (const auto& [key, value] : schema.items())
    if (key != "type" && key != "description" && key != "title" && key != "examples" &&
        key != "default" && key != "$comment")
      return false;
  return true;
}

// A name as DSML quotes it: a '"' or '<' (or a newline) would end the attribute early.
Status CheckDsmlName(const std::string& name, const std::string& what) {
  if (name.empty() || name.find_first_of("\"<\n") != std::string::npos)
    return Status::InvalidArgument("constraint: " + what + " \"" + name +
                                   "\" cannot be written in a DSML tool call (a name must be "
                                   "non-empty, without '\"', '<' or a newline)");
  return Status::Ok();
}

// One DSML invoke of tool `t`.
StatusOr<Expr> DsmlInvoke(GrammarBuilder& b, const Json& t) {
  const std::string name = t.value("name", "");
  RETURN_IF_ERROR(CheckDsmlName(name, "tool"));
  const Json params = t.value("parameters", Json::object());
  const std::string where = "constraint: tool \"" + name + "\": ";
  if (!params.is_object()) return Status::InvalidArgument(where + "parameters is not an object");
  for (const char* key : {"anyOf", "oneOf", "allOf", "$ref", "not", "if"})
    if (params.contains(key))
      return Status::InvalidArgument(where +
                                     "DSML tool calls write one parameter per property, "
                                     "so parameters must be an object schema with "
                                     "\"properties\" (it has \"" +
                                     key + "\")");
  if (params.contains("type") && params["type"] != "object")
    return Status::InvalidArgument(where + "parameters must have type \"object\"");
  const Json props = params.value("properties", Json::object());
  if (!props.is_object()) return Status::InvalidArgument(where + "properties is not an object");
  std::vector<std::string> required;
  for (const Json& r : params.value("required", Json::array()))
    if (r.is_string()) required.push_back(r.get<std::string>());
  for (const std::string& r : required)
    if (!props.contains(r))
      return Status::InvalidArgument(where + "required property \"" + r +
                                     "\" is not among its properties");

  struct Param {
    Expr expr;
    bool required;
  };
  std::vector<Param> list;
  for (const auto& [key, schema] : props.items()) {
    RETURN_IF_ERROR(CheckDsmlName(key, "parameter"));
    const std::string head = "<｜DSML｜parameter name=\"" + key + "\" string=\"";
    Expr value;
    if (PlainString(schema)) {
      value = b.Seq({b.Literal(head + "true\">"),
                     b.Shared("dsml.raw_text", [&] { return TextWithout(b, kParamEnd); })});
    } else {
      Json sub = schema;  // "$ref"s into the parameters' definitions resolve in the property
      for (const char* defs : {"$defs", "definitions"})
        if (sub.is_object() && params.contains(defs) && !sub.contains(defs))
          sub[defs] = params[defs];
      StatusOr<Expr> json = b.JsonSchema(sub);
      if (!json.ok())
        return json.status().WithContext("constraint: tool \"" + name + "\", property \"" + key +
                                         "\"");
      value = b.Seq({b.Literal(head + "false\">"), *json});
    }
    const bool req = std::find(required.begin(), required.end(), key) != required.end();
    list.push_back({b.Seq({value, b.Literal(std::string(kParamEnd))}), req});
  }
  // Joined by "\n": first[i] starts the list at property i, rest[i] goes on after one written.
  Expr first = b.Empty(), rest = b.Empty();
  for (size_t i = list.size(); i-- > 0;) {
    const Expr with_first = b.Seq({list[i].expr, rest});
    const Expr with_rest = b.Seq({b.Literal("\n"), list[i].expr, rest});
    first = list[i].required ? with_first : b.Alt({with_first, first});
    rest = list[i].required ? with_rest : b.Alt({with_rest, rest});
  }
  return b.Seq({b.Literal("<｜DSML｜invoke name=\"" + name + "\">\n"), first,
                b.Literal("\n</｜DSML｜invoke>")});
}

// `block`: function_calls (V3.2) or tool_calls (V4).
StatusOr<std::shared_ptr<const Grammar>> CompileDsml(const Json& spec, const std::string& block) {
  GrammarBuilder b;
  std::vector<Expr> alternatives;
  for (const Json& t : spec["tools"]) {
    ASSIGN_OR_RETURN(Expr invoke, DsmlInvoke(b, t));
    alternatives.push_back(invoke);
  }
  const Expr one = b.Alt(std::move(alternatives));
  const Expr more =
      spec.value("parallel", false) ? b.Star(b.Seq({b.Literal("\n"), one})) : b.Empty();
  return b.Build(b.Seq({b.Literal("<｜DSML｜" + block + ">\n"), one, more,
                        b.Literal("\n</｜DSML｜" + block + ">")}));
}

StatusOr<std::shared_ptr<const Grammar>> CompileV3(const Json& spec, const ToolCallTokens& ids,
                                                   bool v31) {
  if (ids.calls_begin < 0 || ids.calls_end < 0 || ids.call_begin < 0 || ids.call_end < 0 ||
      ids.sep < 0)
    return Status::InvalidArgument(
        "constraint: the tokenizer lacks DeepSeek's tool-call tokens (<｜tool▁calls▁begin｜> "
        "...)");
  GrammarBuilder b;
  std::vector<Expr> alternatives;
  for (const Json& t : spec["tools"]) {
    const std::string name = t.value("name", "");
    ASSIGN_OR_RETURN(Expr args, b.JsonSchema(t.value("parameters", Json::object())));
    if (v31)
      alternatives.push_back(b.Seq({b.Literal(name), b.Token(ids.sep), args}));
    else
      alternatives.push_back(b.Seq({b.Literal("function"), b.Token(ids.sep),
                                    b.Literal(name + "\n```json\n"), args, b.Literal("\n```")}));
  }
  const Expr one = b.Seq({b.Token(ids.call_begin), b.Alt(alternatives), b.Token(ids.call_end)});
  const Expr more =
      spec.value("parallel", false) ? b.Star(v31 ? one : b.Seq({b.Literal("\n"), one})) : b.Empty();
  return b.Build(b.Seq({b.Token(ids.calls_begin), one, more, b.Token(ids.calls_end)}));
}

}  // namespace

StatusOr<std::shared_ptr<const Grammar>> CompileToolCalls(const nlohmann::ordered_json& spec,
                                                          const ToolCallTokens& tokens) {
  if (!spec.contains("tools") || !spec["tools"].is_array() || spec["tools"].empty())
    return Status::InvalidArgument("constraint: tool_calls without tools");
  const std::string format = spec.value("format", "deepseek_v3");
  if (format == "deepseek_v32") return CompileDsml(spec, "function_calls");
  if (format == "deepseek_v4") return CompileDsml(spec, "tool_calls");
  if (format == "deepseek_v3" || format == "deepseek_v31")
    return CompileV3(spec, tokens, format == "deepseek_v31");
  return Status::InvalidArgument("constraint: unknown tool-call format \"" + format +
                                 "\" (deepseek_v3, deepseek_v31, deepseek_v32, deepseek_v4)");
}

}  // namespace epserve::grammar
