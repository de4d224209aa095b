// RenderDeepSeekV32Prompt against prompts derived by hand from encoding_dsv32.py
// (deepseek-ai/DeepSeek-V3.2 on Hugging Face, encoding/encoding_dsv32.py: encode_messages ->
// render_message; TOOLS_SYSTEM_TEMPLATE, tool_calls_template, tool_call_template,
// encode_arguments_to_dsml, tool_output_template), for a conversation with a system prompt,
// tools, an assistant tool call and its result, in chat and in thinking mode.
#include "serve/dsv32_prompt.h"

#include <gtest/gtest.h>

namespace epserve::serve {
namespace {

using OJson = nlohmann::ordered_json;

// TOOLS_SYSTEM_TEMPLATE up to "{tool_schemas}", dsml_token "｜DSML｜", thinking tokens
// <think> and </think>.
const std::string kToolsPrompt =
    "## Tools\n\nYou have access to a set of tools you can use to answer the user's question.\n"
    "You can invoke functions by writing a \"<｜DSML｜function_calls>\" block like the following "
    "as part of your reply to the user:\n<｜DSML｜function_calls>\n<｜DSML｜invoke "
    "name=\"$FUNCTION_NAME\">\n<｜DSML｜parameter name=\"$PARAMETER_NAME\" "
    "string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n...\n</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$FUNCTION_NAME2\">\n...\n</｜DSML｜invoke>\n</｜DSML｜function_calls>"
    "\n\nString and scalar parameters should be specified as is without any escaping or quotes, "
    "while lists and objects should use JSON format. The \"string\" attribute should be set to "
    "\"true\" for string type parameters and \"false\" for other types (numbers, booleans, "
    "arrays, objects).\n\nIf the thinking_mode is enabled, then after function results you "
    "should strongly consider outputting a thinking block. Here is an example:\n\n"
    "<｜DSML｜function_calls>\n...\n</｜DSML｜function_calls>\n\n<function_results>\n...\n"
    "</function_results>\n\n<think>...thinking about results</think>\n\nHere are the functions "
    "available in JSONSchema format:\n<functions>\n";

const OJson kTools = OJson::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Weather of a city", "parameters": {"type": "object", "properties":
  {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}])");

OJson Conversation() {
  return OJson::parse(R"([
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Weather in 杭州?"},
    {"role": "assistant", "content": "", "reasoning_content": "Need the tool.",
     "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather",
       "arguments": "{\"city\": \"杭州\", \"days\": 2, \"opts\": {\"a\": [1, true]}}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 20C"}])");
}

// The parts both modes share: the system prompt with tools, then the assistant's call.
const std::string kSystem =
    "<｜begin▁of▁sentence｜>You are helpful.\n\n" + kToolsPrompt +
    R"({"name": "get_weather", "description": "Weather of a city", "parameters": {"type": )"
    R"("object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, )"
    R"("required": ["city"]}})"
    "\n</functions>\n";
const std::string kCall =
    "\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">杭州</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">2</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"opts\" string=\"false\">{\"a\": [1, true]}</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜function_calls><｜end▁of▁sentence｜>";
const std::string kResults =
    "\n\n<function_results>\n<result>Sunny, 20C</result>\n"
    "</function_results>\n\n";

TEST(DeepSeekV32PromptTest, ChatModeWithToolsAndResult) {
  auto p = RenderDeepSeekV32Prompt(Conversation(), kTools, DeepSeekV32Mode::kChat);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(*p, kSystem + "<｜User｜>Weather in 杭州?<｜Assistant｜></think>" + kCall + kResults +
                    "</think>");
}

TEST(DeepSeekV32PromptTest, ThinkingModeWithToolsAndResult) {
  auto p = RenderDeepSeekV32Prompt(Conversation(), kTools, DeepSeekV32Mode::kThinking);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(*p, kSystem + "<｜User｜>Weather in 杭州?<｜Assistant｜><think>Need the tool.</think>" +
                    kCall + kResults + "<think>");
}

TEST(DeepSeekV32PromptTest, MultiTurnWithoutTools) {
  const OJson m = OJson::parse(R"([{"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!", "reasoning_content": "dropped"},
    {"role": "user", "content": "Bye"}])");
  auto chat = RenderDeepSeekV32Prompt(m, nullptr, DeepSeekV32Mode::kChat);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(*chat,
            "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>Hello!<｜end▁of▁sentence｜>"
            "<｜User｜>Bye<｜Assistant｜></think>");
  // Reasoning before the last user turn is not rendered; the last user turn opens <think>.
  auto think = RenderDeepSeekV32Prompt(m, nullptr, DeepSeekV32Mode::kThinking);
  ASSERT_TRUE(think.ok());
  EXPECT_EQ(*think,
            "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>Hello!<｜end▁of▁sentence｜>"
            "<｜User｜>Bye<｜Assistant｜><think>");
}

// The encode_messages example DeepSeek published with encoding_dsv32.py (as quoted in
// alibaba/rtp-llm pull request 415):
// thinking mode, drop_thinking, the default BOS.
TEST(DeepSeekV32PromptTest, PublishedExample) {
  const OJson m = OJson::parse(R"([{"role": "user", "content": "hello"},
    {"role": "assistant", "content": "Hello! I am DeepSeek.", "reasoning_content": "thinking..."},
    {"role": "user", "content": "1+1=?"}])");
  auto p = RenderDeepSeekV32Prompt(m, nullptr, DeepSeekV32Mode::kThinking);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p,
            "<｜begin▁of▁sentence｜><｜User｜>hello<｜Assistant｜></think>Hello! I am "
            "DeepSeek.<｜end▁of▁sentence｜><｜User｜>1+1=?<｜Assistant｜><think>");
}

TEST(DeepSeekV32PromptTest, ToolsWithoutSystemMessageGetOne) {
  const OJson m = OJson::parse(R"([{"role": "user", "content": "Hi"}])");
  auto p = RenderDeepSeekV32Prompt(m, kTools, DeepSeekV32Mode::kChat);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->starts_with("<｜begin▁of▁sentence｜>\n\n## Tools\n\n")) << *p;
  EXPECT_TRUE(p->ends_with("</functions>\n<｜User｜>Hi<｜Assistant｜></think>")) << *p;
}

TEST(DeepSeekV32PromptTest, TwoResultsShareOneBlock) {
  OJson m = Conversation();
  m[2]["tool_calls"].push_back(m[2]["tool_calls"][0]);
  m.push_back({{"role", "tool"}, {"content", "Rain"}});
  auto p = RenderDeepSeekV32Prompt(m, kTools, DeepSeekV32Mode::kChat);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(
      p->ends_with("\n\n<function_results>\n<result>Sunny, 20C</result>\n<result>Rain"
                   "</result>\n</function_results>\n\n</think>"))
      << *p;
}

TEST(DeepSeekV32PromptTest, Errors) {
  EXPECT_FALSE(RenderDeepSeekV32Prompt(OJson::parse(R"([{"role": "tool", "content": "x"}])"),
                                       nullptr, DeepSeekV32Mode::kChat)
                   .ok());
  EXPECT_FALSE(RenderDeepSeekV32Prompt(OJson::parse(R"([{"role": "robot", "content": "x"}])"),
                                       nullptr, DeepSeekV32Mode::kChat)
                   .ok());
  OJson bad = Conversation();
  bad[2]["tool_calls"][0]["function"]["arguments"] = "[1, 2]";
  EXPECT_FALSE(RenderDeepSeekV32Prompt(bad, kTools, DeepSeekV32Mode::kChat).ok());
}

}  // namespace
}  // namespace epserve::serve
