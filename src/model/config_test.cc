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

}  // namespace
}  // namespace epserve
