// Each pre-tokenizer behavior on small inputs; expected splits follow Hugging Face's
// NormalizedString::split folds (the same cases as its own tests: "the-final--countdown").
#include "text/pre_tokenizer.h"

#include <gtest/gtest.h>

namespace epserve::text {
namespace {

std::vector<std::string> PreTokenize(const std::string& json, const std::string& text,
                                     bool at_start = true) {
  auto pre = ParsePreTokenizer(nlohmann::json::parse(json), "test");
  EXPECT_TRUE(pre.ok()) << pre.status().message();
  if (!pre.ok()) return {};
  std::vector<Piece> pieces = {{text, at_start}};
  (*pre)->Apply(&pieces);
  std::vector<std::string> out;
  for (const Piece& p : pieces) out.push_back(p.text);
  return out;
}

std::string SplitJson(const std::string& behavior, bool invert = false) {
  return R"({"type": "Split", "pattern": {"String": "-"}, "behavior": ")" + behavior +
         R"(", "invert": )" + (invert ? "true" : "false") + "}";
}

using V = std::vector<std::string>;

TEST(PreTokenizerTest, SplitBehaviors) {
  const std::string text = "the-final--countdown";
  EXPECT_EQ(PreTokenize(SplitJson("Removed"), text), (V{"the", "final", "countdown"}));
  EXPECT_EQ(PreTokenize(SplitJson("Isolated"), text),
            (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(PreTokenize(SplitJson("MergedWithPrevious"), text),
            (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(PreTokenize(SplitJson("MergedWithNext"), text),
            (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(PreTokenize(SplitJson("Contiguous"), text),
            (V{"the", "-", "final", "--", "countdown"}));
}

TEST(PreTokenizerTest, SplitInvertKeepsOnlyMatchesWhenRemoving) {
  EXPECT_EQ(PreTokenize(SplitJson("Removed", true), "a-b--c"), (V{"-", "-", "-"}));
  EXPECT_EQ(PreTokenize(SplitJson("Isolated", true), "a-b"), (V{"a", "-", "b"}));
  // Inverted, the letters are the delimiters: each merges into the '-' run after it.
  EXPECT_EQ(PreTokenize(SplitJson("MergedWithPrevious", true), "a-b--c"),
            (V{"a", "-b", "-", "-c"}));
}

TEST(PreTokenizerTest, SplitRegexUsesUnicodeProperties) {
  const std::string json =
      R"({"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated"})";
  EXPECT_EQ(PreTokenize(json, "ab12345c٣٤"), (V{"ab", "123", "45", "c", "٣٤"}));
  const std::string cjk =
      R"({"type": "Split", "pattern": {"Regex": "[一-龥]+"}, "behavior": "Isolated"})";
  EXPECT_EQ(PreTokenize(cjk, "hi你好yo"), (V{"hi", "你好", "yo"}));
}

TEST(PreTokenizerTest, ByteLevel) {
  EXPECT_EQ(PreTokenize(R"({"type": "ByteLevel", "add_prefix_space": true, "use_regex": true})",
                        "Hello world's"),
            (V{"\xC4\xA0Hello", "\xC4\xA0world", "'s"}));
  EXPECT_EQ(PreTokenize(R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": false})",
                        "a b\n"),
            (V{"a\xC4\xA0"
               "b\xC4\x8A"}));
}

TEST(PreTokenizerTest, Digits) {
  EXPECT_EQ(PreTokenize(R"({"type": "Digits", "individual_digits": false})", "abc123de4"),
            (V{"abc", "123", "de", "4"}));
  EXPECT_EQ(PreTokenize(R"({"type": "Digits", "individual_digits": true})", "abc123de4"),
            (V{"abc", "1", "2", "3", "de", "4"}));
}

TEST(PreTokenizerTest, Metaspace) {
  const std::string always =
      R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true})";
  EXPECT_EQ(PreTokenize(always, "Hey friend"), (V{"▁Hey", "▁friend"}));
  const std::string first =
      R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false})";
  EXPECT_EQ(PreTokenize(first, "Hey friend", /*at_start=*/true), (V{"▁Hey▁friend"}));
  EXPECT_EQ(PreTokenize(first, "Hey friend", /*at_start=*/false), (V{"Hey▁friend"}));
}

TEST(PreTokenizerTest, WhitespaceAndSequence) {
  EXPECT_EQ(PreTokenize(R"({"type": "Whitespace"})", "Hey, you  there!"),
            (V{"Hey", ",", "you", "there", "!"}));
  EXPECT_EQ(PreTokenize(R"({"type": "WhitespaceSplit"})", " a\tb  c "), (V{"a", "b", "c"}));
  const std::string seq = R"({"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
                              {"type": "Digits", "individual_digits": true}]})";
  EXPECT_EQ(PreTokenize(seq, "x12 y"), (V{"x", "1", "2", "y"}));
}

TEST(PreTokenizerTest, UnsupportedTypeNamesThePlace) {
  auto pre = ParsePreTokenizer(
      nlohmann::json::parse(
          R"({"type": "Sequence", "pretokenizers": [{"type": "Digits"}, {"type": "Foo"}]})"),
      "tokenizer.json: pre_tokenizer");
  ASSERT_FALSE(pre.ok());
  EXPECT_EQ(pre.status().message(),
            "tokenizer.json: pre_tokenizer.pretokenizers[1]: unsupported type \"Foo\"");
}

}  // namespace
}  // namespace epserve::text
