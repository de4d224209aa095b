#include "text/bpe_trainer.h"

#include <gtest/gtest.h>

#include "text/tokenizer.h"

namespace epserve::text {
namespace {

std::unique_ptr<Tokenizer> Train(int vocab_size) {
  auto files = TrainByteLevelBpe({.vocab_size = vocab_size});
  EXPECT_TRUE(files.ok()) << files.status().message();
  if (!files.ok()) return nullptr;
  // Through the JSON text, as the files on disk are read.
  auto tok = Tokenizer::FromJson(nlohmann::json::parse(files->tokenizer.dump()),
                                 nlohmann::json::parse(files->tokenizer_config.dump()));
  EXPECT_TRUE(tok.ok()) << tok.status().message();
  return tok.ok() ? std::move(*tok) : nullptr;
}

TEST(BpeTrainerTest, FillsTheVocabularyExactly) {
  for (int size : {274, 1024, 32000}) {
    auto tok = Train(size);
    ASSERT_NE(tok, nullptr);
    EXPECT_EQ(tok->vocab_size(), size);
    for (int32_t id = 0; id < size; ++id)
      ASSERT_FALSE(tok->IdToToken(id).empty()) << "hole at id " << id;
    EXPECT_EQ(tok->bos_id(), 0);
    EXPECT_EQ(tok->eos_id(), 1);
    EXPECT_TRUE(tok->AddsBos());
    EXPECT_EQ(tok->TokenToId("<｜User｜>"), size - 12);
    EXPECT_EQ(tok->TokenToId("<｜tool▁sep｜>"), size - 1);
  }
  EXPECT_FALSE(TrainByteLevelBpe({.vocab_size = 273}).ok());
}

TEST(BpeTrainerTest, LearnsMergesAndRoundTrips) {
  auto tok = Train(1024);
  ASSERT_NE(tok, nullptr);
  const std::string text =
      "The model reads the tokens. 你好，世界！ def encode(text): return [1, 2, 3] 😀 \n\n\tend";
  auto ids = tok->Encode(text);
  ASSERT_TRUE(ids.ok());
  EXPECT_LT(ids->size(), text.size() / 2);  // merges compress the corpus-like text
  EXPECT_EQ(tok->Decode(*ids).value(), text);
  auto chat = tok->Encode("<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>");
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->front(), 0);
  EXPECT_EQ((*chat)[1], tok->TokenToId("<｜User｜>"));
  EXPECT_EQ(chat->back(), tok->TokenToId("<｜Assistant｜>"));
  // With BOS on request, and deterministic training.
  EXPECT_EQ(tok->Encode("x", {.add_special_tokens = true}).value().front(), 0);
  EXPECT_EQ(TrainByteLevelBpe({.vocab_size = 1024})->tokenizer.dump(),
            TrainByteLevelBpe({.vocab_size = 1024})->tokenizer.dump());
}

TEST(BpeTrainerTest, ConfigCarriesTheChatTemplate) {
  auto files = TrainByteLevelBpe({.vocab_size = 1024});
  ASSERT_TRUE(files.ok());
  const auto& c = files->tokenizer_config;
  EXPECT_EQ(c["bos_token"]["content"], "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(c["eos_token"]["content"], "<｜end▁of▁sentence｜>");
  EXPECT_NE(c["chat_template"].get<std::string>().find("<｜Assistant｜>"), std::string::npos);
}

}  // namespace
}  // namespace epserve::text
