// Grammars a hostile request can ask for (issue 48's probe): each used to crash the process
// (unbounded recursion), hang it (exponential or quadratic work) or pin gigabytes. Each now
// compiles in bounded work or is refused with an error naming the keyword, never a crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "grammar/grammar.h"
#include "grammar/grammar_ir.h"
#include "grammar/test_util.h"

namespace epserve::grammar {
namespace {

using Json = nlohmann::ordered_json;

std::string Nested(int depth, const std::string& inner) {
  return std::string(depth, '(') + inner + std::string(depth, ')');
}

StatusOr<std::shared_ptr<const Grammar>> CompileText(const std::string& text) {
  return CompileJsonSchema(Json::parse(text));
}

// 20,000 nested groups (39 KB) overflowed PatternParser::ParseSeq/ParseAlt's stack (SIGSEGV).
TEST(HostileGrammarTest, DeeplyNestedPatternIsRefused) {
  auto g = CompileJsonSchema(Json{{"type", "string"}, {"pattern", Nested(20000, "a")}});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("groups nested deeper than 128"), std::string::npos)
      << g.status().message();
  EXPECT_NE(g.status().message().find("#/pattern"), std::string::npos);
  EXPECT_LT(g.status().message().size(), 300u) << "the error quotes the pattern whole";
  // At the bound it compiles and matches.
  auto ok = CompileJsonSchema(Json{{"type", "string"}, {"pattern", "^" + Nested(128, "ab") + "$"}});
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  auto v = SmallVocab({});
  EXPECT_TRUE(MatchesBytes(*ok, v, "\"ab\""));
  EXPECT_FALSE(MatchesBytes(*ok, v, "\"abab\""));
}

Json ManyProperties(int n, bool required) {
  Json props = Json::object(), req = Json::array();
  for (int i = 0; i < n; ++i) {
    props["p" + std::to_string(i)] = {{"type", "integer"}};
    if (required) req.push_back("p" + std::to_string(i));
  }
  Json s = {{"type", "object"}, {"properties", props}};
  if (required) s["required"] = req;
  return s;
}

// 8,000 optional properties (105 KB) overflowed Lowering::Emit/LowerRule's stack, and their
// alternations were flattened quadratically.
TEST(HostileGrammarTest, ThousandsOfOptionalPropertiesCompile) {
  auto g = CompileJsonSchema(ManyProperties(8000, false));
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_LT((*g)->elements.size(), size_t{1} << 20);
  auto v = SmallVocab({});
  EXPECT_TRUE(MatchesBytes(*g, v, R"({"p7": 1, "p7999": 2})"));
  EXPECT_TRUE(MatchesBytes(*g, v, "{}"));
  EXPECT_FALSE(MatchesBytes(*g, v, R"({"p7999": 1, "p7": 2})"));  // declared order
}

// 40,000 required ones nested 40,000 sequences deep.
TEST(HostileGrammarTest, TensOfThousandsOfRequiredPropertiesCompile) {
  auto g = CompileJsonSchema(ManyProperties(40000, true));
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto v = SmallVocab({});
  std::string text = "{";
  for (int i = 0; i < 40000; ++i) text += (i ? ", \"p" : "\"p") + std::to_string(i) + "\": 0";
  EXPECT_TRUE(MatchesBytes(*g, v, text + "}"));
  EXPECT_FALSE(MatchesBytes(*g, v, R"({"p0": 0})"));
}

// Levels of `fan` references to the next level: the matcher's expansion used to push fan^levels
// stacks before de-duplicating them (3 × 1000: 41 s and 4.4 GB; 4 levels: 10^12).
TEST(HostileGrammarTest, ReferenceFanOutExpandsOnce) {
  const int levels = 4, fan = 1000;
  Json defs = Json::object();
  for (int l = 0; l < levels; ++l) {
    Json any = Json::array();
    for (int i = 0; i < fan; ++i) any.push_back({{"$ref", "#/$defs/l" + std::to_string(l + 1)}});
    defs["l" + std::to_string(l)] = {{"anyOf", any}};
  }
  defs["l" + std::to_string(levels)] = {{"type", "string"}, {"maxLength", 3}};
  auto g = CompileJsonSchema(Json{{"$defs", defs}, {"$ref", "#/$defs/l0"}});
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto v = SmallVocab({});
  EXPECT_TRUE(MatchesBytes(*g, v, "\"abc\""));
  EXPECT_FALSE(MatchesBytes(*g, v, "\"abcd\""));
  Matcher m(*g, v);
  std::vector<uint64_t> words((v->size() + 63) / 64);
  m.FillMask(words.data());
  EXPECT_TRUE(words['"' / 64] >> ('"' % 64) & 1);
  EXPECT_FALSE(m.Overflowed());
}

// A chain of 30,000 $refs: the fixed point of ComputeMinLengths was quadratic in it (20,000
// links: 7 s), and every walk over the chain must be iterative.
TEST(HostileGrammarTest, LongReferenceChainCompiles) {
  const int n = 30000;  // about what a 1 MiB body holds
  Json defs = Json::object();
  for (int i = 0; i < n; ++i)
    defs["d" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
  defs["d" + std::to_string(n)] = {{"type", "boolean"}};
  auto g = CompileJsonSchema(Json{{"$defs", defs}, {"$ref", "#/$defs/d0"}});
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto v = SmallVocab({});
  EXPECT_TRUE(MatchesBytes(*g, v, "true"));
  EXPECT_FALSE(MatchesBytes(*g, v, "tru"));
}

// A schema nested past the JSON bound a request has (a spec from an engine client, say).
TEST(HostileGrammarTest, DeepSchemaIsRefused) {
  std::string text;
  for (int i = 0; i < 64; ++i) text += R"({"type":"array","items":)";
  text += R"({"type":"null"})" + std::string(64, '}');
  ASSERT_TRUE(CompileText(text).ok()) << "128 levels of JSON are allowed";
  text.clear();
  for (int i = 0; i < 5000; ++i) text += R"({"type":"array","items":)";
  text += R"({"type":"null"})" + std::string(5000, '}');
  auto g = CompileText(text);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("schema nested deeper than 128 levels of JSON"),
            std::string::npos)
      << g.status().message().substr(0, 300);
}

// A start state of more parse stacks than kMaxClosure is refused at build time as too complex.
TEST(HostileGrammarTest, HugeStartStateIsTooComplex) {
  GrammarBuilder b;
  std::vector<GrammarBuilder::Expr> alts;
  for (int i = 0; i < 300000; ++i) alts.push_back(b.Literal("x" + std::to_string(i)));
  auto g = b.Build(b.Alt(alts));
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(IsTooComplex(g.status())) << g.status().message();
}

// An ambiguous grammar whose states double per level (L_k ::= L_{k-1} "a" | L_{k-1} "b"): the
// start is small, the state after "q" is 2^20 stacks. The matcher stops expanding at the
// bound, says so, and refuses every token instead of growing without end.
TEST(HostileGrammarTest, ExplodingLaterStateOverflows) {
  GrammarBuilder b;
  GrammarBuilder::Expr level = b.Literal("z");
  for (int k = 0; k < 20; ++k) {
    const auto r = b.NewRule("l" + std::to_string(k));
    b.SetRule(r, b.Alt({b.Seq({level, b.Literal("a")}), b.Seq({level, b.Literal("b")})}));
    level = b.Ref(r);
  }
  auto g = b.Build(b.Seq({b.Literal("q"), level}));
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto v = SmallVocab({});
  Matcher m(*g, v);
  EXPECT_FALSE(m.AcceptToken('q'));
  EXPECT_TRUE(m.Overflowed());
  EXPECT_FALSE(m.AcceptToken('z'));
}

// Too many expressions (a body's worth of enum values at most is about 1M).
TEST(HostileGrammarTest, TooManyExpressionsIsTooComplex) {
  GrammarBuilder b;
  auto g = b.Build(b.Literal(std::string(kMaxGrammarExprs, 'a')));
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(IsTooComplex(g.status())) << g.status().message();
}

// A DAG that doubles per level with nothing to emit: 2^60 steps of lowering, now bounded.
TEST(HostileGrammarTest, DoublingEmptyDagIsBounded) {
  GrammarBuilder b;
  GrammarBuilder::Expr e = b.Empty();
  for (int i = 0; i < 60; ++i) e = b.Seq({e, e});
  auto g = b.Build(b.Seq({b.Literal("x"), e}));
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(IsTooComplex(g.status())) << g.status().message();
}

}  // namespace
}  // namespace epserve::grammar

namespace epserve::grammar {
namespace {

// 64 distinct schemas of large grammars used to stay cached by count (64 × 4M elements: 4.3 GB);
// the cache is bounded by the bytes its grammars hold.
TEST(GrammarCacheTest, BoundedInBytes) {
  SetGrammarCacheBytes(size_t{8} << 20);
  size_t largest = 0;
  for (int i = 0; i < 24; ++i) {
    auto g = CompileJsonSchema(
        Json{{"type", "string"}, {"maxLength", 3000 + i}, {"description", std::to_string(i)}});
    ASSERT_TRUE(g.ok()) << g.status().message();
    largest = std::max(largest, (*g)->MemoryBytes());
    const GrammarCacheStats s = GrammarCacheStatistics();
    EXPECT_LE(s.bytes, size_t{8} << 20);
    EXPECT_GT(s.entries, 0u);
  }
  EXPECT_GT(largest * 24, size_t{8} << 20) << "the schemas must outgrow the bound";
  EXPECT_GT(GrammarCacheStatistics().evictions, 0);
  // The most recent one is still cached: the same grammar comes back.
  auto again =
      CompileJsonSchema(Json{{"type", "string"}, {"maxLength", 3023}, {"description", "23"}});
  auto once_more =
      CompileJsonSchema(Json{{"type", "string"}, {"maxLength", 3023}, {"description", "23"}});
  ASSERT_TRUE(again.ok() && once_more.ok());
  EXPECT_EQ(again->get(), once_more->get());
  SetGrammarCacheBytes(kDefaultGrammarCacheBytes);
}

}  // namespace
}  // namespace epserve::grammar
