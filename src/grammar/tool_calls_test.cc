#include "grammar/tool_calls.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "grammar/test_util.h"

namespace epserve::grammar {
namespace {

using Json = nlohmann::ordered_json;

const Json kWeather = {{"name", "get_weather"},
                       {"parameters",
                        {{"type", "object"},
                         {"properties",
                          {{"city", {{"type", "string"}, {"description", "a city"}}},
                           {"days", {{"type", "integer"}}},
                           {"unit", {{"type", "string"}, {"enum", {"c", "f"}}}}}},
                         {"required", {"city"}}}}};
const Json kTime = {{"name", "get_time"}, {"parameters", {{"type", "object"}}}};

std::shared_ptr<const Grammar> Dsml(const Json& tools, bool parallel) {
  auto g = CompileToolCalls(Json{{"type", "tool_calls"},
                                 {"format", "deepseek_v32"},
                                 {"tools", tools},
                                 {"parallel", parallel}},
                            {});
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? *g : nullptr;
}

std::string Param(const std::string& key, bool string, const std::string& value) {
  return "<｜DSML｜parameter name=\"" + key + "\" string=\"" + (string ? "true" : "false") + "\">" +
         value + "</｜DSML｜parameter>";
}
std::string Invoke(const std::string& name, const std::vector<std::string>& params) {
  std::string s = "<｜DSML｜invoke name=\"" + name + "\">\n";
  for (size_t i = 0; i < params.size(); ++i) s += (i ? "\n" : "") + params[i];
  return s + "\n</｜DSML｜invoke>";
}
std::string Block(const std::vector<std::string>& invokes) {
  std::string s = "<｜DSML｜function_calls>\n";
  for (size_t i = 0; i < invokes.size(); ++i) s += (i ? "\n" : "") + invokes[i];
  return s + "\n</｜DSML｜function_calls>";
}

TEST(DsmlToolCallsTest, TheReferenceRenderingMatchesAndBrokenOnesDoNot) {
  const auto g = Dsml(Json::array({kWeather, kTime}), /*parallel=*/false);
  const auto v = SmallVocab({});
  const std::string city = Param("city", true, "Paris \"centre\"");
  // As encoding_dsv32.py renders calls (dsml_test.sh's scripted output has the same shape).
  EXPECT_TRUE(MatchesBytes(g, v, Block({Invoke("get_weather", {city})})));
  EXPECT_TRUE(MatchesBytes(g, v,
                           Block({Invoke("get_weather", {city, Param("days", false, "3"),
                                                         Param("unit", false, "\"f\"")})})));
  EXPECT_TRUE(MatchesBytes(g, v, Block({Invoke("get_time", {})})));
  // The required parameter missing; an integer written raw; an enum outside its values; a
  // parameter the schema lacks; a tool that does not exist; two calls when not parallel.
  EXPECT_FALSE(MatchesBytes(g, v, Block({Invoke("get_weather", {Param("days", false, "3")})})));
  EXPECT_FALSE(
      MatchesBytes(g, v, Block({Invoke("get_weather", {city, Param("days", true, "3")})})));
  EXPECT_FALSE(
      MatchesBytes(g, v, Block({Invoke("get_weather", {city, Param("unit", false, "\"k\"")})})));
  EXPECT_FALSE(MatchesBytes(g, v, Block({Invoke("get_time", {Param("x", false, "1")})})));
  EXPECT_FALSE(MatchesBytes(g, v, Block({Invoke("get_date", {})})));
  EXPECT_FALSE(MatchesBytes(g, v, Block({Invoke("get_time", {}), Invoke("get_time", {})})));
  const auto parallel = Dsml(Json::array({kWeather, kTime}), /*parallel=*/true);
  EXPECT_TRUE(
      MatchesBytes(parallel, v, Block({Invoke("get_time", {}), Invoke("get_weather", {city})})));
}

// Raw text is exactly the UTF-8 strings without "</｜DSML｜parameter>": random strings over
// an alphabet of the terminator's own characters (and a two-byte one, and a stray byte).
TEST(DsmlToolCallsTest, RawTextIsAnyUtf8WithoutTheTerminator) {
  const auto g = Dsml(Json::array({kWeather}), false);
  const auto v = SmallVocab({});
  const std::string end = "</｜DSML｜parameter>";
  const std::vector<std::string> alphabet = {
      "<", "/", "｜", "D", "S", "M", "L",    "p",          "a",
      "r", "m", "e",  "t", ">", "é", "\xff", "</｜DSML｜", "</｜DSML｜parameter"};
  std::mt19937 rng(5);
  int accepted = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text;
    const int n = static_cast<int>(rng() % 8);
    for (int j = 0; j < n; ++j) text += alphabet[rng() % alphabet.size()];
    if (rng() % 4 == 0) text.insert(rng() % (text.size() + 1), end);
    const bool want = text.find(end) == std::string::npos && text.find('\xff') == std::string::npos;
    const bool got =
        MatchesBytes(g, v, Block({Invoke("get_weather", {Param("city", true, text)})}));
    EXPECT_EQ(got, want) << text;
    (want ? accepted : refused)++;
  }
  EXPECT_GT(accepted, 300);
  EXPECT_GT(refused, 300);
}

TEST(DsmlToolCallsTest, SchemasDsmlCannotWriteAreRefusedByName) {
  const auto error = [](const Json& tool) {
    auto g = CompileToolCalls(
        Json{{"type", "tool_calls"}, {"format", "deepseek_v32"}, {"tools", Json::array({tool})}},
        {});
    return g.ok() ? std::string("ok") : g.status().message();
  };
  EXPECT_NE(error({{"name", "f"}, {"parameters", {{"anyOf", Json::array()}}}}).find("\"f\""),
            std::string::npos);
  EXPECT_NE(error({{"name", "f\"x"}, {"parameters", {{"type", "object"}}}}).find("f\"x"),
            std::string::npos);
  EXPECT_NE(error({{"name", "f"}, {"parameters", {{"type", "object"}, {"required", {"missing"}}}}})
                .find("missing"),
            std::string::npos);
  // A "$ref" into the parameters' $defs resolves from inside the property.
  EXPECT_EQ(error({{"name", "f"},
                   {"parameters",
                    {{"type", "object"},
                     {"$defs", {{"n", {{"type", "integer"}}}}},
                     {"properties", {{"x", {{"$ref", "#/$defs/n"}}}}}}}}),
            "ok");
  EXPECT_NE(error({{"name", "f"}, {"parameters", {{"type", "object"}}}}).find("ok"),
            std::string::npos);
  auto unknown = CompileToolCalls(
      Json{{"type", "tool_calls"}, {"format", "xml"}, {"tools", Json::array({kTime})}}, {});
  EXPECT_FALSE(unknown.ok());
}

TEST(DsmlToolCallsTest, DeepSeekV4NamesItsBlockToolCalls) {
  auto g = CompileToolCalls(
      Json{{"type", "tool_calls"}, {"format", "deepseek_v4"}, {"tools", Json::array({kTime})}}, {});
  ASSERT_TRUE(g.ok()) << g.status().message();
  const auto v = SmallVocab({});
  const std::string call = Invoke("get_time", {});
  // As encoding_dsv4.py renders an assistant's calls (tool_calls_template).
  EXPECT_TRUE(MatchesBytes(*g, v, "<｜DSML｜tool_calls>\n" + call + "\n</｜DSML｜tool_calls>"));
  EXPECT_FALSE(MatchesBytes(*g, v, Block({call})));  // V3.2's function_calls block
}

}  // namespace
}  // namespace epserve::grammar
