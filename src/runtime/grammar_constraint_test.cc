#include "runtime/grammar_constraint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "model/test_util.h"
#include "runtime/engine.h"
#include "runtime/loaded_model.h"
#include "text/bpe_trainer.h"

namespace epserve {
namespace {

using Json = nlohmann::json;

// The tiny model with make-model's trained tokenizer (1024 ids, DeepSeek-V3's special tokens).
class GrammarConstraintTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::MakeTiny("grammar_" + std::to_string(::getpid()));
    auto files = text::TrainByteLevelBpe({.vocab_size = 1024});
    ASSERT_TRUE(files.ok()) << files.status().message();
    ASSERT_TRUE(text::WriteTokenizerFiles(*files, dir_).ok());
    loaded_ = LoadModel(dir_, {}).value().release();
    pool_ = new ThreadPool(2);
    model_ = new Model(loaded_->config, *loaded_->weights, *pool_);
    tok_ = std::shared_ptr<const text::Tokenizer>(text::Tokenizer::Load(dir_).value());
  }
  static void TearDownTestSuite() {
    delete model_;
    delete pool_;
    delete loaded_;
    tok_.reset();
    std::filesystem::remove_all(dir_);
  }
  // Samples one constrained request at temperature 1; returns its output bytes.
  static std::string Generate(const std::string& spec, uint64_t seed, int max_tokens,
                              FinishReason* finish) {
    EngineOptions o{.block_size = 16, .num_blocks = 256};
    o.default_stop_ids = {1};
    o.constraints = GrammarConstraintFactory(tok_, {1});
    Engine e(*model_, o);
    auto id = e.Submit({.prompt = {0, 50, 60, 70},
                        .sampling = {.temperature = 1.0f, .seed = seed},
                        .constraint = spec,
                        .max_tokens = max_tokens});
    EXPECT_TRUE(id.ok()) << id.status().message();
    std::vector<int32_t> out;
    for (int i = 0; i < max_tokens + 5 && e.HasWork(); ++i) {
      auto ev = e.Step();
      EXPECT_TRUE(ev.ok());
      for (auto& x : *ev) {
        if (x.token >= 0 && x.token != 1) out.push_back(x.token);
        if (x.finish != FinishReason::kNone) *finish = x.finish;
        EXPECT_TRUE(x.error.empty()) << x.error;
      }
    }
    std::string bytes;
    EXPECT_TRUE(tok_->DecodeBytes(out, {}, &bytes).ok());
    return bytes;
  }
  static std::string dir_;
  static LoadedModel* loaded_;
  static ThreadPool* pool_;
  static Model* model_;
  static std::shared_ptr<const text::Tokenizer> tok_;
};
std::string GrammarConstraintTest::dir_;
LoadedModel* GrammarConstraintTest::loaded_ = nullptr;
ThreadPool* GrammarConstraintTest::pool_ = nullptr;
Model* GrammarConstraintTest::model_ = nullptr;
std::shared_ptr<const text::Tokenizer> GrammarConstraintTest::tok_;

TEST_F(GrammarConstraintTest, SchemaOutputsParseAndMatchEvenWhenTheBudgetRunsOut) {
  const Json schema = {
      {"type", "object"},
      {"properties",
       {{"name", {{"type", "string"}}},
        {"tags", {{"type", "array"}, {"items", {{"enum", {"a", "b"}}}}, {"minItems", 1}}}}},
      {"required", {"name", "tags"}}};
  const std::string spec = Json{{"type", "json_schema"}, {"schema", schema}}.dump();
  // 40 tokens: the random model never ends a string by itself, so the closing path ends it.
  for (uint64_t seed : {1, 2, 3}) {
    FinishReason finish = FinishReason::kNone;
    const std::string out = Generate(spec, seed, 40, &finish);
    const Json v = Json::parse(out, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << out;
    ASSERT_TRUE(v.is_object()) << out;
    EXPECT_TRUE(v["name"].is_string()) << out;
    ASSERT_TRUE(v["tags"].is_array()) << out;
    EXPECT_GE(v["tags"].size(), 1u) << out;
    for (const Json& t : v["tags"]) EXPECT_TRUE(t == "a" || t == "b") << out;
  }
}

TEST_F(GrammarConstraintTest, ToolCallBlocksHaveTheModelsFormat) {
  const Json tools =
      Json::array({{{"name", "f"}, {"parameters", {{"type", "object"}}}},
                   {{"name", "g"},
                    {"parameters",
                     {{"type", "object"},
                      {"properties", {{"x", {{"type", "integer"}}}, {"s", {{"type", "string"}}}}},
                      {"required", {"x", "s"}}}}}});
  const std::string v3 = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>";
  const std::string v31 = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>";
  const std::string v32 = "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"";
  const std::string v3_end = "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  const std::string v32_end = "\n</｜DSML｜invoke>\n</｜DSML｜function_calls>";
  for (const std::string format : {"deepseek_v3", "deepseek_v31", "deepseek_v32"}) {
    for (uint64_t seed : {7, 8}) {
      const std::string spec = Json{
          {"type", "tool_calls"},
          {"format", format},
          {"tools", tools},
          {"parallel", false}}.dump();
      FinishReason finish = FinishReason::kNone;
      // DSML's framing is ~90 bytes of text, more tokens than the tiny vocabulary's budget of 60.
      const std::string out = Generate(spec, seed, format == "deepseek_v32" ? 240 : 60, &finish);
      const std::string& begin = format == "deepseek_v3"    ? v3
                                 : format == "deepseek_v31" ? v31
                                                            : v32;
      const std::string& end = format == "deepseek_v32" ? v32_end : v3_end;
      EXPECT_EQ(out.rfind(begin, 0), 0u) << out;
      ASSERT_GE(out.size(), end.size());
      EXPECT_EQ(out.substr(out.size() - end.size()), end) << out;
      EXPECT_EQ(finish, FinishReason::kStop) << out;
    }
  }
}

TEST_F(GrammarConstraintTest, BadSpecsAreRefusedAtSubmit) {
  EngineOptions o{.block_size = 16, .num_blocks = 16};
  o.constraints = GrammarConstraintFactory(tok_, {1});
  Engine e(*model_, o);
  EXPECT_NE(e.Submit({.prompt = {1}, .constraint = "{\"type\": \"xml\"}"})
                .status()
                .message()
                .find("unknown type"),
            std::string::npos);
  EXPECT_NE(
      e.Submit({.prompt = {1}, .constraint = R"({"type": "json_schema", "schema": {"type": "object",
                                        "patternProperties": {}}})"})
          .status()
          .message()
          .find("patternProperties"),
      std::string::npos);
}

}  // namespace
}  // namespace epserve
