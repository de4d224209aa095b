// RenderDeepSeekV4Prompt against DeepSeek-V4's own encoder: tests/serve/dsv4_prompt_cases.json
// holds OpenAI chat requests and the prompt encoding_dsv4.py's encode_messages renders for each
// (written by tests/serve/make_dsv4_prompt_cases.py, which maps a request to the script's input
// as the server does): tools in thinking and chat mode, tool results out of call order, tool
// results followed by user text, reasoning dropped before the last user turn, reasoning
// effort, latest_reminder and developer turns, a response schema, content parts.
#include "serve/dsv4_prompt.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace epserve::serve {
namespace {

using OJson = nlohmann::ordered_json;

OJson Cases() {
  const std::string path = std::string(EPSERVE_SOURCE_DIR) + "/tests/serve/dsv4_prompt_cases.json";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  OJson j = OJson::parse(text.str(), nullptr, false);
  EXPECT_TRUE(j.is_object()) << path;
  return j.is_object() ? j["cases"] : OJson::array();
}

StatusOr<std::string> Render(const OJson& c) {
  const OJson kwargs = c.value("chat_template_kwargs", OJson::object());
  const std::string effort = c.value("reasoning_effort", "");
  OJson schema;
  if (c.contains("response_format") && c["response_format"]["type"] == "json_schema")
    schema = c["response_format"]["json_schema"]["schema"];
  return RenderDeepSeekV4Prompt(c["messages"], c.value("tools", OJson()), schema,
                                DeepSeekV4OptionsFor(kwargs, effort));
}

TEST(DeepSeekV4Prompt, RendersAsDeepSeeksEncoder) {
  const OJson cases = Cases();
  ASSERT_GE(cases.size(), 16u);
  for (const OJson& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    StatusOr<std::string> got = Render(c);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(*got, c["expected"].get<std::string>());
  }
}

TEST(DeepSeekV4Prompt, ThinkingFollowsKwargsThenReasoningEffort) {
  EXPECT_FALSE(ThinkingRequested(OJson::object(), ""));
  EXPECT_TRUE(ThinkingRequested(OJson::object(), "low"));
  EXPECT_FALSE(ThinkingRequested(OJson::object(), "none"));
  EXPECT_FALSE(ThinkingRequested(OJson{{"thinking", false}}, "max"));
  EXPECT_TRUE(ThinkingRequested(OJson{{"enable_thinking", true}}, ""));
  EXPECT_FALSE(ThinkingRequested(OJson{{"thinking", "yes"}}, ""));  // not a boolean: ignored
  EXPECT_TRUE(DeepSeekV4OptionsFor(OJson::object(), "xhigh").reasoning_effort_max);
  EXPECT_FALSE(DeepSeekV4OptionsFor(OJson::object(), "high").reasoning_effort_max);
}

TEST(DeepSeekV4Prompt, RefusesWhatTheScriptCannotRender) {
  const OJson tools = OJson::array();
  auto render = [&](const char* messages) {
    return RenderDeepSeekV4Prompt(OJson::parse(messages), tools, OJson(), {});
  };
  StatusOr<std::string> r = render(R"([{"role": "wizard", "content": "x"}])");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("messages[0]: unknown role \"wizard\""), std::string::npos);
  r = render(R"([{"role": "user", "content": "a"}, {"role": "developer", "content": ""}])");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("messages[1]"), std::string::npos);
  r = render(R"([{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [
      {"type": "function", "function": {"name": "f", "arguments": "[1]"}}]}])");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("messages[1].tool_calls[0]"), std::string::npos);
  EXPECT_FALSE(RenderDeepSeekV4Prompt(OJson::object(), tools, OJson(), {}).ok());
}

}  // namespace
}  // namespace epserve::serve
