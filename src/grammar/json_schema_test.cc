#include <gtest/gtest.h>

#include "grammar/grammar.h"
#include "grammar/test_util.h"

namespace epserve::grammar {
namespace {

using nlohmann::json;

std::shared_ptr<const Grammar> Compile(const std::string& schema, SchemaOptions o = {}) {
  auto g = CompileJsonSchema(nlohmann::ordered_json::parse(schema), o);
  EXPECT_TRUE(g.ok()) << schema << ": " << g.status().message();
  return g.ok() ? *g : nullptr;
}

std::string Error(const std::string& schema) {
  auto g = CompileJsonSchema(json::parse(schema));
  return g.ok() ? "ok" : g.status().message();
}

TEST(JsonSchemaTest, ErrorsNameTheKeywordAndPointer) {
  EXPECT_EQ(
      Error(R"({"type":"object","properties":{"tags":{"type":"object","patternProperties":{}}}})"),
      "unsupported JSON Schema keyword 'patternProperties' at #/properties/tags");
  EXPECT_EQ(Error(R"({"type":"array","items":{"type":"string","minLength":-1}})"),
            "'minLength' must be a non-negative integer at #/items/minLength");
  EXPECT_EQ(Error(R"({"$defs":{"a/b":{"not":{}}},"$ref":"#/$defs/a~1b"})"),
            "unsupported JSON Schema keyword 'not' at #/$defs/a~1b");
  EXPECT_EQ(Error(R"({"$ref":"#/$defs/missing"})"),
            "'$ref' to '#/$defs/missing' resolves to nothing at #");
  EXPECT_EQ(Error(R"({"$ref":"http://x/y.json"})"),
            "'$ref' to 'http://x/y.json' is not supported (only \"#\" and \"#/...\") at #");
  EXPECT_EQ(Error(R"({"allOf":[{"type":"string"},{"minLength":2}]})"),
            "'allOf' with other than one member is not supported at #/allOf");
  EXPECT_EQ(Error(R"({"type":"array","uniqueItems":true})"),
            "unsupported JSON Schema keyword 'uniqueItems' at #");
  EXPECT_EQ(Error(R"({"type":"number","minimum":0.5})"),
            "'minimum' = 0.5 is not supported (only integer bounds within ±2^53) at #/minimum");
  EXPECT_EQ(Error(R"j({"type":"string","pattern":"a(?=b)"})j"),
            "#/pattern: unsupported pattern 'a(?=b)': only (?:...) groups are supported");
  EXPECT_EQ(Error(R"({"type":"object","properties":{},"required":["x"]})"),
            "required property 'x' is not declared in 'properties' at #");
  EXPECT_EQ(Error(R"({"type":"integer","minimum":5,"maximum":4})"),
            "'minimum' above 'maximum': no value fits at #");
  EXPECT_EQ(Error(R"({"type":"widget"})"), "unknown type 'widget' at #/type");
  EXPECT_EQ(Error(R"(false)"), "schema 'false' matches nothing at #");
  EXPECT_EQ(Error(R"({"type":"string","title":"x","format":"date-time","examples":["a"]})"), "ok");
}

TEST(JsonSchemaTest, ObjectsInDeclaredOrderWithOptionalProperties) {
  auto g = Compile(R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"},
                      "c":{"type":"boolean"}},"required":["a"],"additionalProperties":false})");
  auto v = SmallVocab({});
  for (const char* ok : {R"({"a":"x"})", R"({"b": 1, "a": "x"})", R"({"b":-3,"a":"","c":true})",
                         R"({"a":"x", "c":false})"}) {
    EXPECT_TRUE(MatchesBytes(g, v, ok)) << ok;
  }
  for (const char* bad : {R"({})", R"({"a":"x","b":1})", R"({"b":1})", R"({"a":"x",})",
                          R"({"a":"x",  "c":true})", R"({ "a":"x"})", R"({"a":"x","d":1})"}) {
    EXPECT_FALSE(MatchesBytes(g, v, bad)) << bad;
  }
}

TEST(JsonSchemaTest, CompactWhitespace) {
  auto g =
      Compile(R"({"type":"array","items":{"type":"integer"}})", {.whitespace = Whitespace::kNone});
  auto v = SmallVocab({});
  EXPECT_TRUE(MatchesBytes(g, v, "[1,2,3]"));
  EXPECT_FALSE(MatchesBytes(g, v, "[1, 2]"));
}

TEST(JsonSchemaTest, PrettyWhitespace) {
  const std::string schema =
      R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}},
      "b":{"type":"object","properties":{"c":{"type":"null"}}}}})";
  auto pretty = Compile(schema, {.whitespace = Whitespace::kPretty});
  auto v = SmallVocab({});
  const std::string dumped =
      "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {\n    \"c\": null\n  }\n}";
  EXPECT_TRUE(MatchesBytes(pretty, v, dumped));  // Python's json.dumps(indent=2)
  EXPECT_TRUE(MatchesBytes(pretty, v, R"({"a": [1, 2], "b": {}})"));
  EXPECT_TRUE(MatchesBytes(pretty, v, "{\n}"));
  EXPECT_FALSE(MatchesBytes(pretty, v, "{\n\n\n}"));  // after "{" and before "}": two at most
  EXPECT_FALSE(MatchesBytes(pretty, v, "{\n" + std::string(33, ' ') + "}"));
  EXPECT_FALSE(MatchesBytes(Compile(schema), v, dumped));
}

TEST(JsonSchemaTest, StringsAreValidUtf8AndEscaped) {
  auto g = Compile(R"({"type":"string","minLength":2,"maxLength":3})");
  auto v = SmallVocab({});
  EXPECT_TRUE(MatchesBytes(g, v, R"("ab")"));
  EXPECT_TRUE(MatchesBytes(g, v, "\"\xC3\xA9\\n\\u00e9\""));  // 3 characters
  EXPECT_TRUE(MatchesBytes(g, v, "\"\xF0\x9F\x98\x80x\""));   // an emoji is one character
  EXPECT_FALSE(MatchesBytes(g, v, R"("a")"));
  EXPECT_FALSE(MatchesBytes(g, v, R"("abcd")"));
  EXPECT_FALSE(MatchesBytes(g, v, "\"a\nb\""));           // raw control character
  EXPECT_FALSE(MatchesBytes(g, v, "\"a\xC0\xAF\""));      // overlong encoding
  EXPECT_FALSE(MatchesBytes(g, v, "\"a\xED\xA0\x80\""));  // a surrogate
  EXPECT_FALSE(MatchesBytes(g, v, R"("a\ud800")"));       // a lone surrogate escape
  EXPECT_FALSE(MatchesBytes(g, v, R"("a\x")"));
}

TEST(JsonSchemaTest, NumbersAndRanges) {
  auto v = SmallVocab({});
  auto num = Compile(R"({"type":"number"})");
  for (const char* ok : {"0", "-0", "1.5", "-12.25e+3", "3E7"})
    EXPECT_TRUE(MatchesBytes(num, v, ok)) << ok;
  for (const char* bad : {"01", "1.", ".5", "+1", "1e"})
    EXPECT_FALSE(MatchesBytes(num, v, bad)) << bad;
  auto range = Compile(R"({"type":"integer","minimum":-15,"maximum":230})");
  for (int x = -40; x <= 300; ++x) {
    EXPECT_EQ(MatchesBytes(range, v, std::to_string(x)), x >= -15 && x <= 230) << x;
  }
  EXPECT_FALSE(MatchesBytes(range, v, "007"));
  auto excl = Compile(R"({"type":"integer","exclusiveMinimum":0})");
  EXPECT_FALSE(MatchesBytes(excl, v, "0"));
  EXPECT_TRUE(MatchesBytes(excl, v, "1"));
  EXPECT_TRUE(MatchesBytes(excl, v, "123456789012"));
  auto neg = Compile(R"({"type":"integer","maximum":-100})");
  EXPECT_TRUE(MatchesBytes(neg, v, "-100"));
  EXPECT_TRUE(MatchesBytes(neg, v, "-123456"));
  EXPECT_FALSE(MatchesBytes(neg, v, "-99"));
  EXPECT_FALSE(MatchesBytes(neg, v, "5"));
  auto bounded = Compile(R"({"type":"number","minimum":-2,"maximum":10})");
  for (const char* ok : {"-2", "-1.99", "-0", "0.5", "9.999", "10", "10.000"}) {
    EXPECT_TRUE(MatchesBytes(bounded, v, ok)) << ok;
  }
  for (const char* bad : {"-2.01", "10.01", "11", "-3", "1e2"}) {
    EXPECT_FALSE(MatchesBytes(bounded, v, bad)) << bad;
  }
}

TEST(JsonSchemaTest, ArraysEnumsAnyOfRefsAndNullable) {
  auto v = SmallVocab({});
  auto arr = Compile(R"({"type":"array","items":{"enum":["a",1,null]},"minItems":1,"maxItems":2})");
  EXPECT_TRUE(MatchesBytes(arr, v, R"(["a"])"));
  EXPECT_TRUE(MatchesBytes(arr, v, R"([1, null])"));
  EXPECT_FALSE(MatchesBytes(arr, v, R"([])"));
  EXPECT_FALSE(MatchesBytes(arr, v, R"([1,1,1])"));
  EXPECT_FALSE(MatchesBytes(arr, v, R"(["b"])"));
  auto tuple = Compile(
      R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})");
  EXPECT_TRUE(MatchesBytes(tuple, v, R"(["x", 2])"));
  EXPECT_FALSE(MatchesBytes(tuple, v, R"(["x", 2, 3])"));
  auto draft7 = Compile(
      R"({"type":"array","items":[{"type":"integer"},{"type":"boolean"}],"additionalItems":{"type":"null"}})");
  EXPECT_TRUE(MatchesBytes(draft7, v, R"([1, true, null, null])"));
  EXPECT_FALSE(MatchesBytes(draft7, v, R"([1, true, 2])"));
  auto tree = Compile(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
      "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},"$ref":"#/$defs/node"})");
  EXPECT_TRUE(MatchesBytes(tree, v, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(MatchesBytes(tree, v, R"({"v":1,"kids":[{"w":2}]})"));
  auto any = Compile(
      R"({"anyOf":[{"type":"string"},{"type":"object","properties":{"s":{"type":"string"}}}],"title":"x"})");
  EXPECT_TRUE(MatchesBytes(any, v, R"("s")"));
  EXPECT_TRUE(MatchesBytes(any, v, R"({"s":"x"})"));
  auto nullable = Compile(R"({"type":["integer","null"]})");
  EXPECT_TRUE(MatchesBytes(nullable, v, "null"));
  EXPECT_TRUE(MatchesBytes(nullable, v, "7"));
  auto openapi = Compile(R"({"type":"string","nullable":true})");
  EXPECT_TRUE(MatchesBytes(openapi, v, "null"));
  auto free = Compile(R"({"type":"object","additionalProperties":{"type":"integer"}})");
  EXPECT_TRUE(MatchesBytes(free, v, R"({"x": 1, "y": 2})"));
  EXPECT_FALSE(MatchesBytes(free, v, R"({"x": "1"})"));
  auto self = Compile(
      R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["next"]})");
  EXPECT_TRUE(MatchesBytes(self, v, R"({"next": {"next": null}})"));
}

TEST(JsonSchemaTest, Patterns) {
  auto v = SmallVocab({});
  auto g = Compile(R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3,4}(x|yz)?$"})");
  for (const char* ok : {R"("AB-123")", R"("ZZ-1234x")", R"("QQ-000yz")"})
    EXPECT_TRUE(MatchesBytes(g, v, ok)) << ok;
  for (const char* bad : {R"("ab-123")", R"("AB-12")", R"("AB-123y")", R"(" AB-123")"}) {
    EXPECT_FALSE(MatchesBytes(g, v, bad)) << bad;
  }
  auto unanchored = Compile(R"({"type":"string","pattern":"a\"b"})");
  EXPECT_TRUE(MatchesBytes(unanchored, v, R"("xxa\"bzz")"));
  EXPECT_FALSE(MatchesBytes(unanchored, v, R"("xxab")"));
  auto negated = Compile(R"({"type":"string","pattern":"^[^a-c]+$"})");
  EXPECT_TRUE(MatchesBytes(negated, v, "\"xyz\xC3\xA9\""));
  EXPECT_FALSE(MatchesBytes(negated, v, R"("xaz")"));
}

TEST(JsonSchemaTest, CacheReturnsTheSameGrammar) {
  const json s = json::parse(R"({"type":"object","properties":{"q":{"type":"string"}}})");
  auto a = CompileJsonSchema(s), b = CompileJsonSchema(s);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  auto any = AnyJsonObject();
  auto vocab = SmallVocab({});
  EXPECT_TRUE(MatchesBytes(any, vocab, R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_FALSE(MatchesBytes(any, vocab, R"([1])"));
}

}  // namespace
}  // namespace epserve::grammar
