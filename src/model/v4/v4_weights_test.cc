#include "model/v4/v4_weights.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace epserve::v4 {
namespace {

struct Blob {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// A checkpoint directory with the tiny config (shrunk) and the given tensors.
class V4WeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("v4_weights_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    auto c = nlohmann::json::parse(R"({
      "model_type": "deepseek_v4", "vocab_size": 4, "hidden_size": 32, "num_hidden_layers": 1,
      "num_attention_heads": 1, "head_dim": 96, "qk_rope_head_dim": 32, "q_lora_rank": 32,
      "o_groups": 1, "o_lora_rank": 32, "sliding_window": 4, "compress_ratios": [0],
      "compress_rope_theta": 160000, "index_n_heads": 1, "index_head_dim": 32,
      "index_topk": 2, "hc_mult": 2, "hc_sinkhorn_iters": 3, "n_routed_experts": 2,
      "num_experts_per_tok": 1, "moe_intermediate_size": 32})");
    std::ofstream(dir_ / "config.json") << c.dump();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Write(const std::vector<Blob>& blobs) {
    nlohmann::json h = nlohmann::json::object();
    std::string data;
    for (const Blob& b : blobs) {
      h[b.name] = {{"dtype", b.dtype},
                   {"shape", b.shape},
                   {"data_offsets", {data.size(), data.size() + b.bytes.size()}}};
      data += b.bytes;
    }
    const std::string hs = h.dump();
    const uint64_t n = hs.size();
    std::ofstream f(dir_ / "model.safetensors", std::ios::binary);
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << hs << data;
  }

  static Blob Bf16(const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return {name, "BF16", shape, std::string(2 * n, '\0')};
  }

  std::filesystem::path dir_;
};

TEST_F(V4WeightsTest, MissingTensorIsNamed) {
  Write({Bf16("embed.weight", {4, 32})});
  auto w = V4Weights::Load(dir_);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("tensor head.weight: missing (want [4, 32])"),
            std::string::npos)
      << w.status().message();
}

TEST_F(V4WeightsTest, MisshapedTensorIsNamed) {
  Write({Bf16("embed.weight", {4, 31})});
  auto w = V4Weights::Load(dir_);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("tensor embed.weight: shape [4, 31], want [4, 32]"),
            std::string::npos)
      << w.status().message();
}

TEST_F(V4WeightsTest, Fp8WithoutScaleIsNamed) {
  Write({{"embed.weight", "F8_E4M3", {4, 32}, std::string(128, '\0')}});
  auto w = V4Weights::Load(dir_);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("embed.weight: quantized weight without its embed.scale"),
            std::string::npos)
      << w.status().message();
}

TEST_F(V4WeightsTest, BadConfigFieldIsNamed) {
  std::ofstream(dir_ / "config.json") << R"({"model_type": "deepseek_v4", "vocab_size": 4})";
  Write({Bf16("embed.weight", {4, 32})});
  auto w = V4Weights::Load(dir_);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("hidden_size is missing"), std::string::npos)
      << w.status().message();
}

TEST_F(V4WeightsTest, TruncatedFileIsRefused) {
  Write({Bf16("embed.weight", {4, 32})});
  std::filesystem::resize_file(dir_ / "model.safetensors",
                               std::filesystem::file_size(dir_ / "model.safetensors") - 10);
  auto w = V4Weights::Load(dir_);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("embed.weight"), std::string::npos) << w.status().message();
}

}  // namespace
}  // namespace epserve::v4
