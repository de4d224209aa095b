#include "base/json.h"

#include <gtest/gtest.h>

namespace epserve {
namespace {

TEST(JsonTest, ParseErrorsSayWhereTheTextBroke) {
  // Truncated after the second line: the parser stops one past the end.
  auto r = ParseJson("{\n  \"a\": 1,\n  \"b\": [1, 2", "c.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(r.status().message().rfind("c.json: invalid JSON at line 3, column 13: ", 0), 0u)
      << r.status().message();
  EXPECT_EQ(r.status().message().find("json.exception"), std::string::npos);
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  // A bad character in the middle of the first line.
  r = ParseJson("{\"a\": x}", "c.json");
  EXPECT_EQ(r.status().message().rfind("c.json: invalid JSON at column 7: syntax error", 0), 0u)
      << r.status().message();
  // One JSONL row (with its newline): a column only.
  r = ParseJson("{\"a\": 1,}\n", "t.jsonl:4");
  EXPECT_EQ(r.status().message().rfind("t.jsonl:4: invalid JSON at column 9: ", 0), 0u)
      << r.status().message();
  EXPECT_EQ(
      ParseJson("", "e.json").status().message().rfind("e.json: invalid JSON at column 1: ", 0),
      0u);
  EXPECT_TRUE(ParseJson(" {\"a\": [1]} ", "ok.json").ok());
  EXPECT_TRUE(ParseOrderedJson("{\"b\": 1, \"a\": 2}", "ok.json").ok());
}

TEST(JsonTest, NestingDepthIsCountedWithoutRecursion) {
  EXPECT_EQ(JsonNestingDepth("12", 64), 0);
  EXPECT_EQ(JsonNestingDepth("{\"a\": [1, {\"b\": []}], \"c\": {}}", 64), 4);
  // Brackets inside strings, escaped quotes included, do not count.
  EXPECT_EQ(JsonNestingDepth("[\"[[[\\\"[[\", \"{\"]", 64), 1);
  // A hostile depth stops the count at the limit + 1, long before the end of the text.
  const std::string deep(1'000'000, '[');
  EXPECT_EQ(JsonNestingDepth(deep, 64), 65);
  EXPECT_EQ(JsonNestingDepth(std::string(64, '[') + std::string(64, ']'), 64), 64);
  // The parser refuses what nests deeper than kMaxJsonDepth, naming the limit; it used to take it
  // and leave the stack overflow to whatever walked the value next.
  auto r = ParseJson(std::string(100'000, '[') + std::string(100'000, ']'), "d.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "d.json: JSON nested deeper than 512 levels");
  EXPECT_TRUE(
      ParseJson(std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']'), "ok").ok());
}

TEST(JsonTest, FieldNamesTheMissingKeyAndFile) {
  const nlohmann::json j = {{"a", 1}};
  auto f = JsonField(j, "a", "x.json");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(**f, 1);
  EXPECT_EQ(JsonField(j, "b", "x.json: model").status().message(),
            "x.json: model: missing key \"b\"");
  EXPECT_EQ(JsonField(nlohmann::json::array(), "b", "x.json").status().message(),
            "x.json: expected an object, got array");
}

TEST(JsonTest, ExceptionTextDropsTheLibraryPrefix) {
  try {
    (void)nlohmann::json::object().at("k");
    FAIL();
  } catch (const nlohmann::json::exception& e) {
    EXPECT_EQ(JsonExceptionText(e), "key 'k' not found");
  }
  EXPECT_EQ(ReadJsonFile("/no/such/file.json").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace epserve
