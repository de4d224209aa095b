#include "model/v4/v4_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace epserve::v4 {
namespace {

nlohmann::json Tiny() {
  return nlohmann::json::parse(R"({
    "model_type": "deepseek_v4", "vocab_size": 512, "hidden_size": 256, "num_hidden_layers": 4,
    "num_nextn_predict_layers": 1, "num_attention_heads": 4, "head_dim": 128,
    "qk_rope_head_dim": 64, "q_lora_rank": 128, "o_groups": 2, "o_lora_rank": 128,
    "sliding_window": 8, "compress_ratios": [0, 4, 16, 4, 0], "compress_rope_theta": 160000,
    "rope_theta": 10000, "rope_scaling": {"type": "yarn", "factor": 16,
    "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1},
    "index_n_heads": 4, "index_head_dim": 128, "index_topk": 4, "hc_mult": 4,
    "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "rms_norm_eps": 1e-6, "n_routed_experts": 16,
    "num_experts_per_tok": 4, "n_shared_experts": 1, "moe_intermediate_size": 128,
    "num_hash_layers": 1, "scoring_func": "sqrtsoftplus", "routed_scaling_factor": 1.5,
    "swiglu_limit": 1.5})");
}

TEST(V4Config, ParsesTheTinyConfig) {
  auto c = ParseV4Config(Tiny().dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->hidden_size, 256);
  EXPECT_EQ(c->compress_ratios.size(), 5u);
  EXPECT_EQ(c->rope_original_len, 65536);
  EXPECT_EQ(c->HcMixWidth(), 24);
  EXPECT_EQ(c->OGroupIn(), 256);
}

TEST(V4Config, ErrorsNameTheField) {
  auto j = Tiny();
  j.erase("index_topk");
  auto c = ParseV4Config(j.dump(), "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("index_topk"), std::string::npos);
  j = Tiny();
  j["model_type"] = "deepseek_v3";
  EXPECT_NE(ParseV4Config(j.dump(), "x").status().message().find("model_type"), std::string::npos);
  j = Tiny();
  j["compress_ratios"] = {0, 4};
  EXPECT_NE(ParseV4Config(j.dump(), "x").status().message().find("compress_ratios"),
            std::string::npos);
  j = Tiny();
  j["hidden_size"] = "256";
  EXPECT_NE(ParseV4Config(j.dump(), "x").status().message().find("hidden_size"), std::string::npos);
}

}  // namespace
}  // namespace epserve::v4
