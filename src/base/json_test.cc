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
