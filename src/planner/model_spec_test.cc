#include "planner/model_spec.h"

#include <gtest/gtest.h>

#include "planner/test_util.h"

namespace epserve::planner {
namespace {

using testing::Model;

TEST(ModelSpecTest, DeepSeekV3KvBytesPerTokenIsExactly70272) {
  ModelSpec v3 = Model("deepseek-v3");
  EXPECT_EQ(v3.KvBytesPerToken(), 70272);  // 61 layers x (512 + 64) x 2 bytes
  EXPECT_EQ(v3.KvBytesPerTokenWithMtp(), 62 * 576 * 2);
}

TEST(ModelSpecTest, DeepSeekV3ShapesAndParameterCounts) {
  ModelSpec v3 = Model("deepseek-v3");
  EXPECT_EQ(v3.NumMoeLayers(), 58);
  EXPECT_EQ(v3.NumDenseLayers(), 3);
  EXPECT_EQ(v3.weight_format, WeightFormat::kFp8Block);
  EXPECT_EQ(v3.weight_block_size, 128);
  EXPECT_EQ(v3.q_lora_rank, 1536);
  EXPECT_EQ(v3.n_group, 8);
  EXPECT_EQ(v3.topk_group, 4);
  ParamCounts p = CountParams(v3);
  EXPECT_NEAR(p.MainModel() / 1e9, 671, 671 * 0.005);           // 671 B parameters
  EXPECT_NEAR(p.active_per_token / 1e9, 37, 37 * 0.03);         // 37 B active per token
  EXPECT_NEAR((p.MainModel() + p.mtp) / 1e9, 685, 685 * 0.01);  // with the MTP module
}

TEST(ModelSpecTest, DeepSeekV2LiteHasNoQLoraAndBf16Weights) {
  ModelSpec lite = Model("deepseek-v2-lite");
  EXPECT_EQ(lite.q_lora_rank, 0);
  EXPECT_EQ(lite.weight_format, WeightFormat::kBf16);
  EXPECT_EQ(lite.n_routed_experts, 64);
  EXPECT_EQ(lite.n_shared_experts, 2);
  EXPECT_EQ(lite.num_experts_per_tok, 6);
  EXPECT_EQ(lite.num_nextn_predict_layers, 0);
  EXPECT_EQ(lite.KvBytesPerToken(), 27 * 576 * 2);
  ParamCounts p = CountParams(lite);
  EXPECT_NEAR(p.MainModel() / 1e9, 15.7, 15.7 * 0.02);     // 15.7 B parameters
  EXPECT_NEAR(p.active_per_token / 1e9, 2.4, 2.4 * 0.15);  // ~2.4 B active
}

TEST(ModelSpecTest, Fp8WeightBytesIncludeBlockScales) {
  ModelSpec v3 = Model("deepseek-v3");
  // o_proj [7168 x 16384]: one byte per weight + 56 x 128 fp32 scales.
  EXPECT_DOUBLE_EQ(v3.LinearWeightBytes(7168, 16384), 7168.0 * 16384 + 56 * 128 * 4);
  ModelSpec lite = Model("deepseek-v2-lite");
  EXPECT_DOUBLE_EQ(lite.LinearWeightBytes(10, 20), 400);
}

TEST(ModelSpecTest, BadConfigsNameTheField) {
  nlohmann::json config = nlohmann::json::parse(R"({
    "hidden_size": 64, "num_hidden_layers": 2, "first_k_dense_replace": 1,
    "intermediate_size": 128, "n_routed_experts": 8, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "num_attention_heads": 4, "kv_lora_rank": 16,
    "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8, "vocab_size": 100})");
  EXPECT_TRUE(ModelSpecFromConfig(config, "tiny").ok());
  nlohmann::json missing = config;
  missing.erase("kv_lora_rank");
  StatusOr<ModelSpec> m = ModelSpecFromConfig(missing, "tiny");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("kv_lora_rank"), std::string::npos);
  nlohmann::json groups = config;
  groups["n_group"] = 3;
  EXPECT_FALSE(ModelSpecFromConfig(groups, "tiny").ok());
  nlohmann::json text = config;
  text["hidden_size"] = "big";
  EXPECT_FALSE(ModelSpecFromConfig(text, "tiny").ok());
  nlohmann::json quant = config;
  quant["quantization_config"] = {{"quant_method", "awq"}};
  EXPECT_FALSE(ModelSpecFromConfig(quant, "tiny").ok());
  EXPECT_FALSE(LoadModelConfig("/nonexistent/config.json").ok());
}

}  // namespace
}  // namespace epserve::planner
