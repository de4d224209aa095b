// The tokenizer on small hand-written tokenizer.json files: BPE merges (both forms), unk,
// byte_fallback, added-token flags, normalizers, decoders, post-processing.
#include "text/tokenizer.h"

#include <gtest/gtest.h>

#include "text/normalizer.h"

namespace epserve::text {
namespace {

using Ids = std::vector<int32_t>;

// vocab: a b c ab abc bc ' ' <unk>; merges "a b" (string form) then ["ab", "c"] and ["b", "c"].
nlohmann::json SmallTokenizer() {
  return nlohmann::json::parse(R"({
    "added_tokens": [
      {"id": 10, "content": "<sp>", "special": true, "normalized": false},
      {"id": 11, "content": "[X]", "special": false, "lstrip": true, "rstrip": true},
      {"id": 12, "content": "word", "special": false, "single_word": true},
      {"id": 13, "content": "ab c", "special": false}
    ],
    "normalizer": null,
    "pre_tokenizer": {"type": "WhitespaceSplit"},
    "model": {"type": "BPE", "unk_token": "<unk>",
              "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4, "bc": 5, " ": 6, "<unk>": 7},
              "merges": ["a b", ["ab", "c"], ["b", "c"]]},
    "decoder": {"type": "Fuse"}
  })");
}

std::unique_ptr<Tokenizer> Make(const nlohmann::json& j, const nlohmann::json& config = nullptr) {
  auto t = Tokenizer::FromJson(j, config);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? std::move(*t) : nullptr;
}

Ids Encode(const Tokenizer& t, std::string_view text, bool special = false) {
  auto ids = t.Encode(text, {.add_special_tokens = special});
  EXPECT_TRUE(ids.ok()) << ids.status().message();
  return ids.ok() ? *ids : Ids{};
}

TEST(TokenizerTest, BpeMergesByRank) {
  auto t = Make(SmallTokenizer());
  EXPECT_EQ(Encode(*t, "abc"), (Ids{4}));  // a b -> ab (rank 0), ab c -> abc (rank 1)
  EXPECT_EQ(Encode(*t, "abcab"), (Ids{4, 3}));
  EXPECT_EQ(Encode(*t, "bc"), (Ids{5}));
  EXPECT_EQ(Encode(*t, "cba"), (Ids{2, 1, 0}));
  EXPECT_EQ(Encode(*t, "axb"), (Ids{0, 7, 1}));  // unknown character -> <unk>
  EXPECT_EQ(t->vocab_size(), 14);
  EXPECT_EQ(t->TokenToId("abc"), 4);
  EXPECT_EQ(t->IdToToken(11), "[X]");
  EXPECT_EQ(t->TokenToId("nope"), -1);
}

TEST(TokenizerTest, AddedTokenFlags) {
  auto t = Make(SmallTokenizer());
  EXPECT_EQ(Encode(*t, "a<sp>b"), (Ids{0, 10, 1}));
  // lstrip/rstrip swallow the whitespace around "[X]".
  EXPECT_EQ(Encode(*t, "a  [X]  b"), (Ids{0, 11, 1}));
  // single_word: only where "word" is not part of a longer word.
  EXPECT_EQ(Encode(*t, "a word"), (Ids{0, 12}));
  EXPECT_EQ(Encode(*t, "aword"), (Ids{0, 7, 7, 7, 7}));
  // Longest match first: "ab c" (an added token with a space) beats splitting at the space.
  EXPECT_EQ(Encode(*t, "ab c"), (Ids{13}));
}

TEST(TokenizerTest, DecodeSkipsSpecialTokensOnRequest) {
  auto t = Make(SmallTokenizer());
  EXPECT_EQ(t->Decode(Ids{0, 10, 1, 11}).value(), "a<sp>b[X]");
  EXPECT_EQ(t->Decode(Ids{0, 10, 1, 11}, {.skip_special_tokens = true}).value(), "ab[X]");
  EXPECT_FALSE(t->Decode(Ids{8}).ok());   // a hole in the id space
  EXPECT_FALSE(t->Decode(Ids{99}).ok());  // out of range
}

TEST(TokenizerTest, BosFromConfigAndPostProcessor) {
  nlohmann::json j = SmallTokenizer();
  auto t = Make(
      j, nlohmann::json::parse(
             R"({"bos_token": {"content": "<sp>"}, "eos_token": "[X]", "add_bos_token": true})"));
  EXPECT_EQ(t->bos_id(), 10);
  EXPECT_EQ(t->eos_id(), 11);
  EXPECT_TRUE(t->AddsBos());
  EXPECT_EQ(Encode(*t, "a", /*special=*/true), (Ids{10, 0}));
  EXPECT_EQ(Encode(*t, "a"), (Ids{0}));
  j["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<sp>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "[X]", "type_id": 0}}],
      "special_tokens": {"<sp>": {"id": "<sp>", "ids": [10], "tokens": ["<sp>"]}}})");
  auto t2 = Make(j);
  EXPECT_EQ(Encode(*t2, "b", /*special=*/true), (Ids{10, 1, 11}));
}

TEST(TokenizerTest, ByteFallbackAndIgnoreMerges) {
  nlohmann::json j = nlohmann::json::parse(R"({
    "model": {"type": "BPE", "byte_fallback": true, "ignore_merges": true,
              "vocab": {"h": 0, "i": 1, "hi": 2, "<0xC3>": 3, "<0xA9>": 4, "hih": 5},
              "merges": ["h i"]},
    "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]}})");
  auto t = Make(j);
  EXPECT_EQ(Encode(*t, "hi\xC3\xA9"), (Ids{2, 3, 4}));  // é has no token: its bytes
  EXPECT_EQ(Encode(*t, "hih"), (Ids{5}));               // ignore_merges: a whole-word hit wins
  EXPECT_EQ(t->Decode(Ids{2, 3, 4}).value(), "hi\xC3\xA9");
  EXPECT_EQ(t->Decode(Ids{3}).value(), "\xEF\xBF\xBD");  // a lone lead byte decodes to U+FFFD
}

TEST(TokenizerTest, ContinuingSubwordPrefix) {
  nlohmann::json j = nlohmann::json::parse(R"({
    "model": {"type": "BPE", "continuing_subword_prefix": "##",
              "vocab": {"a": 0, "##b": 1, "##c": 2, "ab": 3, "##bc": 4}, "merges": ["a ##b", "##b ##c"]}})");
  auto t = Make(j);
  EXPECT_EQ(Encode(*t, "ab"), (Ids{3}));
  EXPECT_EQ(Encode(*t, "abc"), (Ids{3, 2}));  // "a ##b" ranks before "##b ##c"
}

std::string Normalize(const std::string& json, std::string text) {
  auto n = ParseNormalizer(nlohmann::json::parse(json), "test");
  EXPECT_TRUE(n.ok()) << n.status().message();
  if (n.ok()) (*n)->Apply(&text);
  return text;
}

TEST(TokenizerTest, Normalizers) {
  EXPECT_EQ(Normalize(R"({"type": "NFC"})", "e\xCC\x81"), "\xC3\xA9");
  EXPECT_EQ(Normalize(R"({"type": "NFD"})", "\xC3\xA9"), "e\xCC\x81");
  EXPECT_EQ(Normalize(R"({"type": "NFKC"})", "\xEF\xAC\x81"), "fi");  // the ligature ﬁ
  EXPECT_EQ(Normalize(R"({"type": "NFKD"})", "\xE2\x91\xA0"), "1");   // ①
  EXPECT_EQ(Normalize(R"({"type": "Lowercase"})",
                      "\xC3\x80"
                      "BC"),
            "\xC3\xA0"
            "bc");
  EXPECT_EQ(Normalize(R"({"type": "Replace", "pattern": {"String": " "}, "content": "▁"})", "a b"),
            "a▁b");
  EXPECT_EQ(
      Normalize(R"({"type": "Replace", "pattern": {"Regex": "\\d+"}, "content": "#"})", "a12b3"),
      "a#b#");
  EXPECT_EQ(Normalize(R"({"type": "Prepend", "prepend": "▁"})", "x"), "▁x");
  EXPECT_EQ(Normalize(R"({"type": "Prepend", "prepend": "▁"})", ""), "");
  EXPECT_EQ(
      Normalize(R"({"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Lowercase"}]})",
                "\xC3\x89"),
      "e\xCC\x81");
}

TEST(TokenizerTest, MetaspaceRoundTrip) {
  nlohmann::json j = nlohmann::json::parse(R"({
    "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
    "model": {"type": "BPE", "vocab": {"▁": 0, "H": 1, "i": 2, "y": 3, "o": 4, "u": 5, "▁Hi": 6, "▁H": 7},
              "merges": ["▁ H", "▁H i"]},
    "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"}})");
  auto t = Make(j);
  const Ids ids = Encode(*t, "Hi you");
  EXPECT_EQ(ids, (Ids{6, 0, 3, 4, 5}));
  EXPECT_EQ(t->Decode(ids).value(), "Hi you");
  IncrementalDecoder stream(*t);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.Add(id).value();
  streamed += stream.Finish();
  EXPECT_EQ(streamed, "Hi you");
}

TEST(TokenizerTest, RejectsInvalidUtf8) {
  auto t = Make(SmallTokenizer());
  auto ids = t->Encode("ab\xFF");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().message(), "text is not valid UTF-8 at byte 2");
}

}  // namespace
}  // namespace epserve::text
