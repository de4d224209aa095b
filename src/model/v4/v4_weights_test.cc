#include "model/v4/v4_weights.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/matmul.h"

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

// The tiny V4 checkpoint of tests/reference/v4_checkpoint.py ("fp8": FP4 routed experts, FP8
// projections), written once for the suite.
class V4TinyCheckpointTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("v4_weights_test_tiny_" + std::to_string(::getpid())));
    std::filesystem::remove_all(*dir_);
    const std::string cmd = std::string("/usr/bin/python3 ") + EPSERVE_SOURCE_DIR +
                            "/tests/reference/v4_checkpoint.py --out " + dir_->string() +
                            " --dtype fp8 --seed 0";
    written_ = std::system(cmd.c_str()) == 0;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  void SetUp() override { ASSERT_TRUE(written_) << "v4_checkpoint.py failed: " << dir_->string(); }

  static std::filesystem::path* dir_;
  static bool written_;
};
std::filesystem::path* V4TinyCheckpointTest::dir_ = nullptr;
bool V4TinyCheckpointTest::written_ = false;

// The FP4 routed experts bound natively (kF4E2M1 views into the mapping) give kernels::MatMul
// outputs bit-identical to the same experts dequantized to BF16 at load, for decode (M <= 8) and
// panel (M > 8) row counts, at a quarter of the bytes (plus one scale byte per 32 weights).
TEST_F(V4TinyCheckpointTest, NativeFp4ExpertsMultiplyAsTheirBf16Widening) {
  auto native = V4Weights::Load(dir_->string());
  ASSERT_TRUE(native.ok()) << native.status().message();
  auto widened = V4Weights::Load(dir_->string(), {.fp4 = V4LoadOptions::Fp4::kBf16});
  ASSERT_TRUE(widened.ok()) << widened.status().message();
  const V4Config& c = (*native)->config();
  ASSERT_EQ((*native)->layers().size(), static_cast<size_t>(c.num_layers));
  ThreadPool pool(2);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int64_t native_bytes = 0, widened_bytes = 0, elements = 0, matrices = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    const V4Layer& a = (*native)->layers()[l];
    const V4Layer& b = (*widened)->layers()[l];
    ASSERT_EQ(a.experts.size(), static_cast<size_t>(c.num_experts));
    // Everything but the routed experts is bound the same way.
    EXPECT_EQ(a.shared.gate.dtype, DType::kF8E4M3);
    EXPECT_EQ(b.shared.gate.dtype, DType::kF8E4M3);
    for (int e = 0; e < c.num_experts; ++e) {
      const WeightView* wa[3] = {&a.experts[e].gate, &a.experts[e].down, &a.experts[e].up};
      const WeightView* wb[3] = {&b.experts[e].gate, &b.experts[e].down, &b.experts[e].up};
      for (int j = 0; j < 3; ++j) {
        const WeightView& fp4 = *wa[j];
        const WeightView& bf16 = *wb[j];
        ASSERT_EQ(fp4.dtype, DType::kF4E2M1);
        ASSERT_EQ(bf16.dtype, DType::kBF16);
        ASSERT_EQ(fp4.rows, bf16.rows);
        ASSERT_EQ(fp4.cols, bf16.cols);
        native_bytes += fp4.Bytes();
        widened_bytes += bf16.Bytes();
        elements += fp4.rows * fp4.cols;
        ++matrices;
        for (int64_t m : {1, 3, 8, 9, 33}) {
          std::vector<float> x(m * fp4.cols);
          for (float& v : x) v = normal(rng);
          std::vector<float> ya(m * fp4.rows, -1.0f), yb(m * fp4.rows, -2.0f);
          kernels::MatMul({.x = x.data(), .num_rows = m, .w = fp4, .y = ya.data()}, pool);
          kernels::MatMul({.x = x.data(), .num_rows = m, .w = bf16, .y = yb.data()}, pool);
          ASSERT_EQ(std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float)), 0)
              << "layer " << l << " expert " << e << " w" << j + 1 << " M " << m;
        }
      }
    }
  }
  EXPECT_EQ(native_bytes, elements / 2 + elements / kFp4BlockSize);
  EXPECT_EQ(widened_bytes, 2 * elements);
  std::printf("routed experts (%lld matrices, %lld weights): FP4 %lld bytes, BF16 %lld bytes\n",
              static_cast<long long>(matrices), static_cast<long long>(elements),
              static_cast<long long>(native_bytes), static_cast<long long>(widened_bytes));
}

// The native views point into the checkpoint's mapping: the expert weights own no memory.
TEST_F(V4TinyCheckpointTest, NativeFp4ExpertsViewTheCheckpoint) {
  auto w = V4Weights::Load(dir_->string());
  ASSERT_TRUE(w.ok()) << w.status().message();
  const TensorInfo* t = (*w)->checkpoint().Find("layers.1.ffn.experts.3.w2.weight");
  const TensorInfo* s = (*w)->checkpoint().Find("layers.1.ffn.experts.3.w2.scale");
  ASSERT_NE(t, nullptr);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(t->dtype, DType::kI8);
  EXPECT_EQ(s->dtype, DType::kF8E8M0);
  const WeightView& v = (*w)->layers()[1].experts[3].down;
  EXPECT_EQ(v.data, t->data);
  EXPECT_EQ(v.scale_ue8m0, s->data);
  EXPECT_EQ(v.DataBytes(), static_cast<int64_t>(t->num_bytes));
  EXPECT_EQ(v.ScaleBytes(), static_cast<int64_t>(s->num_bytes));
}

}  // namespace
}  // namespace epserve::v4
