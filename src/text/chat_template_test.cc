// ChatTemplate: errors (parse and render) name origin:line:column; tokenizer_config.json loading.
#include "text/chat_template.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <thread>

namespace epserve::text {
namespace {

using nlohmann::ordered_json;

std::string ParseError(const std::string& source) {
  auto tpl = ChatTemplate::Parse(source, "chat_template");
  return tpl.ok() ? "ok" : tpl.status().ToString();
}

std::string RenderError(const std::string& source,
                        const ordered_json& ctx = ordered_json::object()) {
  auto tpl = ChatTemplate::Parse(source, "chat_template");
  if (!tpl.ok()) return "parse: " + tpl.status().ToString();
  auto out = tpl->Render(ctx);
  return out.ok() ? "ok: " + *out : out.status().ToString();
}

TEST(ChatTemplateErrors, ParseErrorsNameLineAndColumn) {
  EXPECT_EQ(ParseError("a\n{{ x | xmlattr }}"), "chat_template:2:8: unsupported filter 'xmlattr'");
  EXPECT_EQ(
      ParseError("{% if x %}never closed"),
      "chat_template:1:4: unexpected end of template: 'if' is never closed (expected 'endif')");
  EXPECT_EQ(ParseError("{% for m in ms %}{% if m %}{% endfor %}"),
            "chat_template:1:31: unexpected 'endfor': 'if' opened at 1:21 is not closed (expected "
            "'endif')");
  EXPECT_EQ(ParseError("ok\n  {% frobnicate %}"), "chat_template:2:6: unknown tag 'frobnicate'");
  EXPECT_EQ(ParseError("{% include 'x.j2' %}"), "chat_template:1:4: unsupported tag 'include'");
  EXPECT_EQ(ParseError("{{ 1 + }}"), "chat_template:1:8: unexpected '}}' in expression");
  EXPECT_EQ(ParseError("{{ x is frob }}"), "chat_template:1:9: unsupported test 'frob'");
  EXPECT_EQ(ParseError("{{ 'abc }}"), "chat_template:1:4: unterminated string literal");
  EXPECT_EQ(ParseError("{{ x "),
            "chat_template:1:1: unexpected end of template: missing '}}' for this tag");
  EXPECT_EQ(ParseError("{# no end"), "chat_template:1:1: missing end of comment tag '#}'");
  EXPECT_EQ(ParseError("{{ (1 }}"), "chat_template:1:7: unexpected '}'");
  EXPECT_EQ(ParseError("{% break %}"), "chat_template:1:4: 'break' outside of a for loop");
  EXPECT_EQ(ParseError("{% endif %}"), "chat_template:1:4: unexpected 'endif' outside of a block");
  EXPECT_EQ(ParseError("{{ x @ y }}"), "chat_template:1:6: unexpected character '@'");
}

TEST(ChatTemplateErrors, RenderErrorsNameLineAndColumn) {
  EXPECT_EQ(RenderError("line1\n  {{ raise_exception('roles must alternate') }}"),
            "chat_template:2:6: template raised an error: roles must alternate");
  EXPECT_EQ(RenderError("{{ nope.attr }}"), "chat_template:1:9: 'nope' is undefined");
  EXPECT_EQ(RenderError("{{ 'a' + 1 }}"),
            "chat_template:1:8: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(RenderError("{{ [1].append(2) }}"),
            "chat_template:1:8: access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(RenderError("{% for x in 5 %}{% endfor %}"),
            "chat_template:1:13: 'int' object is not iterable");
  EXPECT_EQ(RenderError("{{ 1 // 0 }}"), "chat_template:1:6: integer division or modulo by zero");
  EXPECT_EQ(RenderError("{{ x|tojson }}"),
            "chat_template:1:6: Object of type Undefined is not JSON serializable");
  EXPECT_EQ(RenderError("{% set ns = 1 %}{% set ns.a = 2 %}"),
            "chat_template:1:20: cannot assign attribute on non-namespace object");
  EXPECT_EQ(RenderError("{% macro m(a) %}{{ a.b.c }}{% endmacro %}\n{{ m({}) }}"),
            "chat_template:1:24: 'dict object' has no attribute 'b'");
  EXPECT_EQ(RenderError("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}"),
            "chat_template:1:4: macro calls nested too deeply (recursion?)");
  EXPECT_EQ(RenderError("{{ range(200000)|length }}"),
            "chat_template:1:4: range too big, maximum size for range is 100000");
  EXPECT_EQ(RenderError("{{ nope|int }}"), "chat_template:1:9: 'nope' is undefined");
  EXPECT_EQ(RenderError("{{ [1] in {} }}"), "chat_template:1:11: unhashable type: 'list'");
  EXPECT_EQ(RenderError("{{ 0 ** -1 }}"),
            "chat_template:1:6: 0.0 cannot be raised to a negative power");
  EXPECT_EQ(RenderError("{{ x }}", ordered_json::array()),
            "chat_template: the render context must be a JSON object");
}

TEST(ChatTemplateErrors, AdversarialInputIsAnErrorNotACrash) {
  std::string parens = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_EQ(ParseError(parens), "chat_template:1:70: template nested too deeply");
  std::string nots = "{{ ";
  for (int i = 0; i < 5000; ++i) nots += "not ";
  EXPECT_EQ(ParseError(nots + "x }}"), "chat_template:1:800: template nested too deeply");
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if x %}";
  EXPECT_EQ(ParseError(ifs), "chat_template:1:1977: template nested too deeply");
  EXPECT_EQ(RenderError("{{ 9223372036854775807 + 1 }}"),
            "chat_template:1:24: integer overflow (outside 64 bits)");
  EXPECT_EQ(RenderError("{{ 2 ** 64 }}"), "chat_template:1:6: integer overflow (outside 64 bits)");
  EXPECT_EQ(RenderError("{{ 'ab' * 100000000 }}"),
            "chat_template:1:9: repetition result too large");
  EXPECT_EQ(RenderError("{{ '%99999999999999999999s' % 'x' }}"),
            "chat_template:1:29: format width or precision too large");
  EXPECT_EQ(RenderError("{{ 'x'|indent(100000000) }}"),
            "chat_template:1:8: indent width too large");
  EXPECT_EQ(RenderError("{{ 1e999 }} {{ 2 ** 62 }}"), "ok: inf 4611686018427387904");
}

TEST(ChatTemplate, RendersAConversationAndIsCopyable) {
  auto tpl = ChatTemplate::Parse(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt "
      "%}<assistant>{% endif %}",
      "t");
  ASSERT_TRUE(tpl.ok()) << tpl.status().ToString();
  ChatTemplate copy = *tpl;
  nlohmann::json ctx = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                        {"add_generation_prompt", true}};
  auto out = copy.Render(ctx);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "<user>hi<assistant>");
  EXPECT_EQ(copy.origin(), "t");
}

TEST(ChatTemplate, OrderedJsonKeepsKeyOrderForTojson) {
  auto tpl = ChatTemplate::Parse("{{ tools|tojson }}", "t");
  ASSERT_TRUE(tpl.ok());
  auto ordered =
      tpl->Render(ordered_json::parse(R"({"tools": {"name": "f", "description": "d"}})"));
  ASSERT_TRUE(ordered.ok());
  EXPECT_EQ(*ordered, R"({"name": "f", "description": "d"})");
}

TEST(ChatTemplate, ConcurrentRendersAgree) {
  auto tpl = ChatTemplate::Parse(
      "{% set ns = namespace(s='') %}{% for i in range(n) %}{% set ns.s = ns.s ~ i %}"
      "{% endfor %}{{ ns.s }}",
      "t");
  ASSERT_TRUE(tpl.ok());
  std::vector<std::string> outs(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { outs[t] = tpl->Render(ordered_json{{"n", 50}}).value(); });
  }
  for (auto& th : threads) th.join();
  for (const auto& o : outs) EXPECT_EQ(o, outs[0]);
  EXPECT_EQ(outs[0].substr(0, 12), "012345678910");
}

class LoadChatTemplateTest : public testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& content) {
    std::string path = testing::TempDir() + "/" + name;
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  std::string LoadError(const std::string& path) {
    auto tpl = LoadChatTemplate(path);
    return tpl.ok() ? "ok" : tpl.status().ToString();
  }
};

TEST_F(LoadChatTemplateTest, StringTemplate) {
  std::string path = Write("tc_string.json", R"({"chat_template": "{{ bos_token }}x"})");
  auto tpl = LoadChatTemplate(path);
  ASSERT_TRUE(tpl.ok()) << tpl.status().ToString();
  EXPECT_EQ(tpl->Render(nlohmann::json{{"bos_token", "<s>"}}).value(), "<s>x");
  EXPECT_EQ(tpl->origin(), path + ": chat_template");
}

TEST_F(LoadChatTemplateTest, ListTemplateTakesDefault) {
  std::string path =
      Write("tc_list.json", R"({"chat_template": [{"name": "tool_use", "template": "T"},
                                                                 {"name": "default", "template": "D"}]})");
  auto tpl = LoadChatTemplate(path);
  ASSERT_TRUE(tpl.ok()) << tpl.status().ToString();
  EXPECT_EQ(tpl->Render(nlohmann::json::object()).value(), "D");
}

TEST_F(LoadChatTemplateTest, ProblemsAreOneLineErrorsNamingTheFile) {
  std::string missing = testing::TempDir() + "/does_not_exist.json";
  EXPECT_EQ(LoadError(missing), missing + ": cannot open");
  std::string bad = Write("tc_bad.json", "{not json");
  EXPECT_EQ(LoadError(bad).rfind(
                bad + ": invalid JSON at column 3: syntax error while parsing object key", 0),
            0u)
      << LoadError(bad);
  std::string none = Write("tc_none.json", R"({"bos_token": "<s>"})");
  EXPECT_EQ(LoadError(none), none + ": has no chat_template");
  std::string number = Write("tc_number.json", R"({"chat_template": 5})");
  EXPECT_EQ(LoadError(number),
            number + ": chat_template must be a string or a list of {name, template}, got number");
  std::string no_default =
      Write("tc_nodefault.json", R"({"chat_template": [{"name": "rag", "template": "R"}]})");
  EXPECT_EQ(LoadError(no_default), no_default + ": chat_template has no entry named \"default\"");
  std::string bad_entry = Write("tc_badentry.json", R"({"chat_template": [{"name": "default"}]})");
  EXPECT_EQ(LoadError(bad_entry),
            bad_entry + ": chat_template entries must be {\"name\": str, \"template\": str}");
  std::string bad_tpl = Write("tc_badtpl.json", R"({"chat_template": "ok\n{% if %}"})");
  EXPECT_EQ(LoadError(bad_tpl), bad_tpl + ": chat_template:2:7: unexpected '%}' in expression");
}

TEST_F(LoadChatTemplateTest, RealDeepSeekConfig) {
  // The DeepSeek-V3 tokenizer_config.json shape: bos/eos as AddedToken objects, template a string.
  ordered_json config = {
      {"bos_token", {{"__type", "AddedToken"}, {"content", "<｜begin▁of▁sentence｜>"}}},
      {"chat_template", "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"}};
  auto tpl = ChatTemplateFromConfig(config, "tokenizer_config.json");
  ASSERT_TRUE(tpl.ok()) << tpl.status().ToString();
  auto out = tpl->Render(ordered_json{{"bos_token", "<B>"}, {"messages", {{{"content", "x"}}}}});
  EXPECT_EQ(out.value(), "<B>x");
}

}  // namespace
}  // namespace epserve::text
