#include <gtest/gtest.h>

#include "grammar/grammar.h"
#include "grammar/test_util.h"

namespace epserve::grammar {
namespace {

TEST(GrammarBuilderTest, SequencesAlternativesAndRepeats) {
  GrammarBuilder b;
  const auto digit = b.ByteRange('0', '9');
  const auto root = b.Seq({b.Literal("n="), b.Repeat(digit, 1, 3),
                           b.Optional(b.Alt({b.Literal("!"), b.Literal("?!")}))});
  auto g = b.Build(root);
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto v = SmallVocab({});
  for (const char* ok : {"n=1", "n=123", "n=12!", "n=0?!"})
    EXPECT_TRUE(MatchesBytes(*g, v, ok)) << ok;
  for (const char* bad : {"n=", "n=1234", "n=1?", "x=1", "n=1!!"}) {
    EXPECT_FALSE(MatchesBytes(*g, v, bad)) << bad;
  }
}

TEST(GrammarBuilderTest, RecursiveRules) {
  // Balanced parentheses: P ::= "(" P ")" P | ε
  GrammarBuilder b;
  const auto p = b.NewRule("parens");
  b.SetRule(p, b.Alt({b.Seq({b.Literal("("), b.Ref(p), b.Literal(")"), b.Ref(p)}), b.Empty()}));
  auto g = b.Build(b.Seq({b.Literal("<"), b.Ref(p), b.Literal(">")}));
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto v = SmallVocab({});
  EXPECT_TRUE(MatchesBytes(*g, v, "<>"));
  EXPECT_TRUE(MatchesBytes(*g, v, "<(()())()>"));
  EXPECT_FALSE(MatchesBytes(*g, v, "<(()>"));
  EXPECT_FALSE(MatchesBytes(*g, v, "<)(>"));
}

TEST(GrammarBuilderTest, RefusesLeftRecursionAndUnfinishedRules) {
  {
    GrammarBuilder b;
    const auto r = b.NewRule("list");
    b.SetRule(r, b.Alt({b.Seq({b.Ref(r), b.Literal("x")}), b.Literal("x")}));
    auto g = b.Build(b.Ref(r));
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find("left-recursive"), std::string::npos);
  }
  {
    GrammarBuilder b;
    const auto r = b.NewRule("loop");
    b.SetRule(r, b.Seq({b.Literal("x"), b.Ref(r)}));
    auto g = b.Build(b.Ref(r));
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find("can never complete"), std::string::npos);
  }
  {
    GrammarBuilder b;
    const auto r = b.NewRule("missing");
    auto g = b.Build(b.Ref(r));
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find("has no body"), std::string::npos);
  }
}

TEST(GrammarBuilderTest, SpecialTokensOnlyThroughTokenElements) {
  // vocab: bytes, then specials 256 (calls_begin), 257 (call_end), 258 (stop).
  auto v = SmallVocab({}, 3);
  GrammarBuilder b;
  auto schema = b.JsonSchema(nlohmann::json::parse(
      R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})"));
  ASSERT_TRUE(schema.ok()) << schema.status().message();
  const auto call = b.Seq({b.Literal("f\n"), *schema, b.Token(257)});
  auto g = b.Build(b.Seq({b.Token(256), call, b.Star(b.Seq({b.Literal("\n"), call}))}));
  ASSERT_TRUE(g.ok()) << g.status().message();
  Matcher m(*g, v);
  EXPECT_FALSE(m.AcceptToken('f'));
  EXPECT_FALSE(m.AcceptToken(257));
  EXPECT_FALSE(m.AcceptToken(258));  // the stop id: not complete
  ASSERT_TRUE(m.AcceptToken(256));
  for (char c : std::string("f\n{\"a\": 12}"))
    ASSERT_TRUE(m.AcceptToken(static_cast<uint8_t>(c))) << c;
  EXPECT_FALSE(m.IsComplete());
  std::vector<uint64_t> mask((v->size() + 63) / 64);
  m.FillMask(mask.data());
  EXPECT_TRUE(mask[257 / 64] >> (257 % 64) & 1);
  EXPECT_FALSE(mask[256 / 64] >> (256 % 64) & 1);
  EXPECT_EQ(m.MinBytesToComplete(), 1);
  ASSERT_TRUE(m.AcceptToken(257));
  EXPECT_TRUE(m.IsComplete());
  EXPECT_FALSE(m.IsTerminated());  // "\n" and another call may follow
  ASSERT_TRUE(m.AcceptToken(258));
  EXPECT_TRUE(m.IsTerminated());
  EXPECT_FALSE(m.AcceptToken('\n'));
}

}  // namespace
}  // namespace epserve::grammar
