#include "model/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "model/synthetic.h"

namespace epserve {
namespace {

nlohmann::json TinyJson() { return nlohmann::json::parse(PresetConfig("tiny")->ToJson()); }

TEST(ConfigTest, RoundTripsPresets) {
  for (const auto& name : PresetNames()) {
    ModelConfig c = PresetConfig(name).value();
    auto parsed = ModelConfig::Parse(c.ToJson(), "config.json");
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    EXPECT_EQ(parsed->ToJson(), c.ToJson());
  }
}

TEST(ConfigTest, NullQLoraMeansPlainQProjection) {
  auto j = TinyJson();
  j["q_lora_rank"] = nullptr;
  auto c = ModelConfig::Parse(j.dump(), "config.json");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->q_lora_rank, 0);
}

TEST(ConfigTest, ErrorsNameTheField) {
  auto j = TinyJson();
  j.erase("kv_lora_rank");
  auto c = ModelConfig::Parse(j.dump(), "/m/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "/m/config.json: missing field \"kv_lora_rank\"");
  j = TinyJson();
  j["n_group"] = 5;
  c = ModelConfig::Parse(j.dump(), "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("n_group must divide n_routed_experts"), std::string::npos);
  j = TinyJson();
  j["hidden_size"] = "big";
  c = ModelConfig::Parse(j.dump(), "config.json");
  EXPECT_EQ(c.status().message(), "config.json: field \"hidden_size\" must be an integer, got \"big\"");
  j = TinyJson();
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {64, 64}}};
  c = ModelConfig::Parse(j.dump(), "config.json");
  EXPECT_NE(c.status().message().find("weight_block_size [64,64] is not supported"), std::string::npos);
}

// Integers too big for their field are errors, not values wrapped into a small or negative int.
TEST(ConfigTest, IntegersOutOfRangeAreErrors) {
  auto j = TinyJson();
  j["num_hidden_layers"] = int64_t{1} << 40;
  auto c = ModelConfig::Parse(j.dump(), "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "config.json: field \"num_hidden_layers\" must be an integer in [-2147483648, "
            "2147483647], got 1099511627776");
  j = TinyJson();
  j["hidden_size"] = uint64_t{18446744073709551615u};
  EXPECT_FALSE(ModelConfig::Parse(j.dump(), "config.json").ok());
  j = TinyJson();
  j["eos_token_id"] = int64_t{1} << 33;
  c = ModelConfig::Parse(j.dump(), "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("eos_token_id must be an integer"), std::string::npos);
  j = TinyJson();
  j["bos_token_id"] = -(int64_t{1} << 40);
  EXPECT_FALSE(ModelConfig::Parse(j.dump(), "config.json").ok());
}

TEST(ConfigTest, DeepSeekV3SoftmaxScale) {
  // V3: qk head dim 192, yarn factor 40, mscale_all_dim 1.0.
  auto j = TinyJson();
  j["qk_nope_head_dim"] = 128;
  j["qk_rope_head_dim"] = 64;
  j["rope_scaling"]["factor"] = 40;
  j["rope_scaling"]["mscale_all_dim"] = 1.0;
  auto c = ModelConfig::Parse(j.dump(), "config.json");
  ASSERT_TRUE(c.ok());
  double m = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(c->SoftmaxScale(), m * m / std::sqrt(192.0), 1e-12);
}

// Current transformers re-saves a DeepSeek config with `rope_parameters` (rope_type, rope_theta
// and the YaRN fields in one object) instead of rope_scaling + rope_theta: the same model.
nlohmann::json RopeParametersSpelling(nlohmann::json j) {
  nlohmann::json p = j["rope_scaling"];
  p.erase("type");
  p["rope_type"] = "yarn";
  p["rope_theta"] = j["rope_theta"];
  j["rope_parameters"] = p;
  j.erase("rope_scaling");
  j.erase("rope_theta");
  return j;
}

TEST(ConfigTest, RopeParametersSpellingParsesToTheSameConfig) {
  auto j = TinyJson();
  j["rope_theta"] = 50000.0;  // not the default, so that rope_parameters' own is seen to be read
  auto want = ModelConfig::Parse(j.dump(), "config.json");
  ASSERT_TRUE(want.ok()) << want.status().message();
  ASSERT_TRUE(want->rope_scaling.enabled);
  auto got = ModelConfig::Parse(RopeParametersSpelling(j).dump(), "config.json");
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_TRUE(got->rope_scaling.enabled);
  EXPECT_EQ(got->rope_scaling.factor, want->rope_scaling.factor);
  EXPECT_EQ(got->rope_scaling.original_max_position_embeddings,
            want->rope_scaling.original_max_position_embeddings);
  EXPECT_EQ(got->rope_scaling.mscale_all_dim, want->rope_scaling.mscale_all_dim);
  EXPECT_EQ(got->rope_theta, 50000.0);
  EXPECT_EQ(got->SoftmaxScale(), want->SoftmaxScale());
  EXPECT_EQ(got->ToJson(), want->ToJson());  // every field read, in the rope_scaling spelling
}

TEST(ConfigTest, RopeParametersDefaultMeansPlainRope) {
  auto j = TinyJson();
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 20000}};
  auto c = ModelConfig::Parse(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_FALSE(c->rope_scaling.enabled);
  EXPECT_EQ(c->rope_theta, 20000.0);
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2}};
  c = ModelConfig::Parse(j.dump(), "/m/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "/m/config.json: rope_parameters.rope_type \"linear\" is not supported (want yarn or "
            "default)");
}

TEST(ConfigTest, BothRopeSpellingsMustAgree) {
  auto j = TinyJson();
  auto both = RopeParametersSpelling(j);
  both["rope_scaling"] = j["rope_scaling"];
  both["rope_theta"] = j["rope_theta"];
  auto c = ModelConfig::Parse(both.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->ToJson(), ModelConfig::Parse(j.dump(), "config.json")->ToJson());
  auto bad = both;
  bad["rope_parameters"]["factor"] = 8;
  c = ModelConfig::Parse(bad.dump(), "/m/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message().rfind(
                "/m/config.json: rope_scaling and rope_parameters disagree on factor: ", 0),
            0u)
      << c.status().message();
  bad = both;
  bad["rope_parameters"] = {{"rope_type", "default"}};
  c = ModelConfig::Parse(bad.dump(), "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("rope_scaling and rope_parameters disagree on the type"),
            std::string::npos);
  bad = both;
  bad["rope_parameters"]["rope_theta"] = 1e6;
  c = ModelConfig::Parse(bad.dump(), "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "config.json: rope_theta 10000.0 and rope_parameters.rope_theta 1000000.0 disagree");
  // A null rope_scaling is no statement: rope_parameters decides.
  auto null_scaling = RopeParametersSpelling(j);
  null_scaling["rope_scaling"] = nullptr;
  c = ModelConfig::Parse(null_scaling.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->rope_scaling.enabled);
}

TEST(ConfigTest, ModelTypeAndArchitecturesAreChecked) {
  const std::string supported =
      "(supported: deepseek_v2 (DeepseekV2ForCausalLM), deepseek_v3 (DeepseekV3ForCausalLM), "
      "deepseek_v32 (DeepseekV32ForCausalLM))";
  for (const char* type : {"deepseek_v4", "llama", "deepseek-v3"}) {
    auto j = TinyJson();
    j["model_type"] = type;
    j.erase("architectures");
    auto c = ModelConfig::Parse(j.dump(), "/m/config.json");
    ASSERT_FALSE(c.ok()) << type;
    EXPECT_EQ(c.status().message(), "/m/config.json: model_type \"" + std::string(type) +
                                        "\" is not supported " + supported);
  }
  auto j = TinyJson();
  j["architectures"] = {"DeepseekV2ForCausalLM"};
  auto c = ModelConfig::Parse(j.dump(), "/m/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "/m/config.json: architectures entry \"DeepseekV2ForCausalLM\" contradicts model_type "
            "\"deepseek_v3\" (want DeepseekV3ForCausalLM; " +
                supported.substr(1));
  j["architectures"] = "DeepseekV3ForCausalLM";
  EXPECT_NE(ModelConfig::Parse(j.dump(), "config.json")
                .status()
                .message()
                .find("field \"architectures\" must be a list of strings"),
            std::string::npos);
  j["model_type"] = 3;
  j.erase("architectures");
  EXPECT_EQ(ModelConfig::Parse(j.dump(), "config.json").status().message(),
            "config.json: field \"model_type\" must be a string, got 3");
  // Every family the presets write parses as itself; each architecture alone names its family.
  for (const char* preset : {"tiny", "tiny-v2", "v2-lite", "v3"}) {
    auto p = nlohmann::json::parse(PresetConfig(preset)->ToJson());
    auto parsed = ModelConfig::Parse(p.dump(), "config.json");
    ASSERT_TRUE(parsed.ok()) << preset << ": " << parsed.status().message();
    EXPECT_EQ(parsed->model_type, p["model_type"]);
    p.erase("model_type");
    parsed = ModelConfig::Parse(p.dump(), "config.json");
    ASSERT_TRUE(parsed.ok()) << preset << ": " << parsed.status().message();
    EXPECT_EQ(parsed->model_type, PresetConfig(preset)->model_type);
  }
  // Without model_type an unknown class is refused; with neither field, deepseek_v3.
  j = TinyJson();
  j.erase("model_type");
  j["architectures"] = {"LlamaForCausalLM"};
  EXPECT_EQ(ModelConfig::Parse(j.dump(), "config.json").status().message(),
            "config.json: architectures entry \"LlamaForCausalLM\" is not supported and there is "
            "no model_type " +
                supported);
  j.erase("architectures");
  c = ModelConfig::Parse(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->model_type, "deepseek_v3");
}

}  // namespace
}  // namespace epserve
