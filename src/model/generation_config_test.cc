#include "model/generation_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace epserve {
namespace {

// DeepSeek-V3's generation_config.json as released.
constexpr char kV3[] = R"({"_from_model_config": true, "bos_token_id": 0, "eos_token_id": 1,
  "do_sample": true, "temperature": 0.6, "top_p": 0.95, "transformers_version": "4.46.3"})";

TEST(GenerationConfigTest, ReadsTheSamplingDefaults) {
  auto g = GenerationConfig::Parse(kV3, "/m/generation_config.json");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->temperature, 0.6f);
  EXPECT_EQ(g->top_p, 0.95f);
  EXPECT_FALSE(g->top_k.has_value());
  EXPECT_EQ(g->Source(), "temperature, top_p from /m/generation_config.json");
  g = GenerationConfig::Parse(R"({"top_k": -1, "temperature": null})", "g.json");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->top_k, 0);
  EXPECT_FALSE(g->temperature.has_value());
  g = GenerationConfig::Parse(R"({"max_new_tokens": 8})", "g.json");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->empty());
  EXPECT_EQ(g->Source(), "built-in: g.json sets no temperature, top_p or top_k");
}

TEST(GenerationConfigTest, ErrorsNameTheFileAndField) {
  auto err = [](const char* text) {
    return GenerationConfig::Parse(text, "/m/generation_config.json").status().message();
  };
  EXPECT_EQ(
      err(R"({"temperature": "hot"})"),
      "/m/generation_config.json: field \"temperature\" must be a number in [0, 2], got \"hot\"");
  EXPECT_EQ(err(R"({"temperature": 2.5})"),
            "/m/generation_config.json: field \"temperature\" must be a number in [0, 2], got 2.5");
  EXPECT_EQ(err(R"({"top_p": 0})"),
            "/m/generation_config.json: field \"top_p\" must be a number in (0, 1], got 0");
  EXPECT_EQ(err(R"({"top_p": 1.5})"),
            "/m/generation_config.json: field \"top_p\" must be a number in (0, 1], got 1.5");
  EXPECT_EQ(err(R"({"top_k": 2.5})"),
            "/m/generation_config.json: field \"top_k\" must be an integer >= 0 (0 or -1: all "
            "tokens), got 2.5");
  EXPECT_EQ(err("[1]"), "/m/generation_config.json: expected a JSON object, got array");
  EXPECT_NE(err("{").find("/m/generation_config.json: invalid JSON"), std::string::npos);
}

TEST(GenerationConfigTest, AutoNoneOrAPath) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "epserve_generation_config_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto g = ReadGenerationConfig("auto", dir.string());
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->empty());
  EXPECT_EQ(g->Source(), "built-in: no " + dir.string() + "/generation_config.json");
  std::ofstream(dir / "generation_config.json") << kV3;
  g = ReadGenerationConfig("auto", dir.string());
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->temperature, 0.6f);
  g = ReadGenerationConfig("none", dir.string());
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->empty());
  EXPECT_EQ(g->Source(), "built-in: --generation-config none");
  std::ofstream(dir / "mine.json") << R"({"top_k": 40})";
  g = ReadGenerationConfig((dir / "mine.json").string(), "/elsewhere");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->top_k, 40);
  EXPECT_FALSE(g->temperature.has_value());
  g = ReadGenerationConfig((dir / "missing.json").string(), dir.string());
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(), (dir / "missing.json").string() + ": cannot open");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace epserve
