// Malformed tokenizer.json / tokenizer_config.json: one-line errors naming the file and place.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "text/tokenizer.h"

namespace epserve::text {
namespace {

class TokenizerErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() /
        ("epserve_tok_errors_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes the files and returns Load's error message (empty when it loads).
  std::string LoadError(const std::string& tokenizer, const std::string& config = "") {
    std::ofstream(dir_ / "tokenizer.json") << tokenizer;
    if (!config.empty()) std::ofstream(dir_ / "tokenizer_config.json") << config;
    auto t = Tokenizer::Load(dir_.string());
    if (t.ok()) return "";
    EXPECT_EQ(t.status().message().find('\n'), std::string::npos)
        << "not one line: " << t.status().message();
    return t.status().message();
  }
  std::string Path(const char* name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

const char* kGood =
    R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})";

TEST_F(TokenizerErrorsTest, GoodFileLoads) {
  EXPECT_EQ(LoadError(kGood, R"({"bos_token": "a"})"), "");
}

TEST_F(TokenizerErrorsTest, TruncatedJsonNamesLineAndColumn) {
  const std::string msg =
      LoadError("{\n  \"model\": {\"type\": \"BPE\",\n    \"vocab\": {\"a\": 0");
  EXPECT_EQ(msg.rfind(Path("tokenizer.json") + ": invalid JSON at line 3, column 21: ", 0), 0u)
      << msg;
}

TEST_F(TokenizerErrorsTest, MissingFile) {
  auto t = Tokenizer::Load((dir_ / "nowhere").string());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("nowhere/tokenizer.json: cannot open"), std::string::npos);
}

TEST_F(TokenizerErrorsTest, WrongTypes) {
  EXPECT_EQ(
      LoadError(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [1]}})"),
      Path("tokenizer.json") +
          ": model.merges[0]: expected a string \"a b\" or a pair [\"a\", \"b\"], got number");
  EXPECT_EQ(LoadError(R"({"model": {"type": "BPE", "vocab": {"a": "zero"}}})"),
            Path("tokenizer.json") +
                ": model.vocab[\"a\"]: expected a non-negative integer id, got string");
  EXPECT_EQ(LoadError(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "fuse_unk": "yes"}})"),
            Path("tokenizer.json") + ": model.fuse_unk: expected a boolean, got string");
  EXPECT_EQ(LoadError(kGood, R"({"bos_token": 5})"),
            Path("tokenizer_config.json") +
                ": bos_token: expected a string or {\"content\": ...}, got number");
  EXPECT_EQ(LoadError(kGood, R"({"add_bos_token": "true"})"),
            Path("tokenizer_config.json") + ": add_bos_token: expected a boolean, got string");
  EXPECT_EQ(LoadError(kGood, R"({"eos_token": "</s>"})"),
            Path("tokenizer_config.json") + ": eos_token: \"</s>\" is not in the vocabulary");
}

// Found with fuzz/tokenizer_fuzz: one huge id made loading allocate a table of 2^31 tokens.
TEST_F(TokenizerErrorsTest, IdsBeyondTheVocabularyBound) {
  EXPECT_EQ(LoadError(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 2147483647}}})"),
            Path("tokenizer.json") + ": model.vocab[\"b\"]: id 2147483647 is not below 4194304");
  EXPECT_EQ(LoadError(R"({"model": {"type": "BPE", "vocab": {"a": 0}},
                          "added_tokens": [{"id": 1999999999, "content": "<s>"}]})"),
            Path("tokenizer.json") + ": added_tokens[0].id: id 1999999999 is not below 4194304");
}

TEST_F(TokenizerErrorsTest, UnsupportedComponents) {
  EXPECT_EQ(LoadError(R"({"model": {"type": "BPE", "vocab": {"a": 0}},
                          "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Digits"}, {"type": "ByteLevel"}, {"type": "Foo"}]}})"),
            Path("tokenizer.json") + ": pre_tokenizer.pretokenizers[2]: unsupported type \"Foo\"");
  EXPECT_EQ(LoadError(R"({"model": {"type": "Unigram", "vocab": []}})"),
            Path("tokenizer.json") + ": model: unsupported type \"Unigram\"");
  EXPECT_EQ(
      LoadError(
          R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "normalizer": {"type": "BertNormalizer"}})"),
      Path("tokenizer.json") + ": normalizer: unsupported type \"BertNormalizer\"");
  EXPECT_EQ(
      LoadError(R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "decoder": {"type": "CTC"}})"),
      Path("tokenizer.json") + ": decoder: unsupported type \"CTC\"");
  EXPECT_EQ(LoadError(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "dropout": 0.1}})"),
            Path("tokenizer.json") +
                ": model.dropout: BPE dropout is not supported (it makes encoding random)");
  EXPECT_EQ(
      LoadError(
          R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "truncation": {"max_length": 5}})"),
      Path("tokenizer.json") +
          ": truncation: not supported (it changes what Encode returns); set it to null");
}

TEST_F(TokenizerErrorsTest, MergesReferencingUnknownTokens) {
  EXPECT_EQ(
      LoadError(
          R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b", "a z"]}})"),
      Path("tokenizer.json") + ": model.merges[1]: token \"z\" is not in the vocab");
  EXPECT_EQ(
      LoadError(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "b"]]}})"),
      Path("tokenizer.json") + ": model.merges[0]: merged token \"ab\" is not in the vocab");
  EXPECT_EQ(
      LoadError(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b c"]}})"),
      Path("tokenizer.json") +
          ": model.merges[0]: expected \"a b\" (two tokens separated by one space), got \"a b c\"");
}

TEST_F(TokenizerErrorsTest, BadRegexNamesThePattern) {
  const std::string msg = LoadError(R"({"model": {"type": "BPE", "vocab": {"a": 0}},
      "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(ab"}, "behavior": "Isolated"}})");
  EXPECT_EQ(
      msg.rfind(Path("tokenizer.json") + ": pre_tokenizer.pattern: invalid regex at offset 3: ", 0),
      0u)
      << msg;
}

}  // namespace
}  // namespace epserve::text
