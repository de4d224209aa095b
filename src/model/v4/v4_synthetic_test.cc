#include "model/v4/v4_synthetic.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/matmul.h"
#include "model/v4/v4_weights.h"

namespace epserve::v4 {
namespace {

namespace fs = std::filesystem;

V4Config Preset(const std::string& name, int layers = 0, int mtp = 0) {
  auto c = V4PresetConfig({.preset = name, .num_layers = layers, .num_mtp_layers = mtp});
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : V4Config{};
}

// tiny-v4 written in fp8 and bf16 (and fp8 in 3 shards) once for the suite.
class V4SyntheticTinyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(fs::temp_directory_path() /
                         ("v4_synthetic_test_" + std::to_string(::getpid())));
    fs::remove_all(*root_);
    const V4Config c = Preset("tiny-v4");
    status_ = new Status(Status::Ok());
    for (auto [name, dtype, shards] :
         {std::tuple{"fp8", WeightDType::kFP8, 1}, std::tuple{"bf16", WeightDType::kBF16, 1},
          std::tuple{"fp8-sharded", WeightDType::kFP8, 3}}) {
      Status st = WriteV4SyntheticCheckpoint(
          {.out_dir = Dir(name), .config = c, .dtype = dtype, .seed = 3, .num_shards = shards});
      if (!st.ok() && status_->ok()) *status_ = st;
    }
  }
  static void TearDownTestSuite() {
    fs::remove_all(*root_);
    delete root_;
    delete status_;
  }
  void SetUp() override { ASSERT_TRUE(status_->ok()) << status_->message(); }

  static std::string Dir(const std::string& name) { return (*root_ / name).string(); }
  static std::unique_ptr<V4Weights> Load(const std::string& name) {
    auto w = V4Weights::Load(Dir(name));
    EXPECT_TRUE(w.ok()) << w.status().message();
    return w.ok() ? std::move(*w) : nullptr;
  }

  static fs::path* root_;
  static Status* status_;
};
fs::path* V4SyntheticTinyTest::root_ = nullptr;
Status* V4SyntheticTinyTest::status_ = nullptr;

void ExpectShape(const WeightView& w, int64_t rows, int64_t cols, DType dtype,
                 const std::string& what) {
  EXPECT_EQ(w.rows, rows) << what;
  EXPECT_EQ(w.cols, cols) << what;
  EXPECT_EQ(w.dtype, dtype) << what;
}

TEST_F(V4SyntheticTinyTest, BothDtypesLoadWithTheStatedShapes) {
  for (const char* name : {"fp8", "bf16"}) {
    SCOPED_TRACE(name);
    const bool fp8 = std::string(name) == "fp8";
    auto w = Load(name);
    ASSERT_NE(w, nullptr);
    const V4Config& c = w->config();
    EXPECT_EQ(c.hidden_size, 256);
    EXPECT_EQ(c.num_layers, 4);
    EXPECT_EQ(c.num_mtp_layers, 0);
    EXPECT_EQ(c.window, 8);
    EXPECT_EQ(c.index_topk, 4);
    EXPECT_EQ(c.num_hash_layers, 1);
    EXPECT_EQ(c.compress_ratios, (std::vector<int>{0, 4, 16, 4}));
    ASSERT_EQ(w->layers().size(), 4u);
    const DType proj = fp8 ? DType::kF8E4M3 : DType::kBF16;
    const DType expert = fp8 ? DType::kF4E2M1 : DType::kBF16;
    ExpectShape(w->embed(), 512, 256, DType::kBF16, "embed");
    ExpectShape(w->head(), 512, 256, DType::kBF16, "head");
    ExpectShape(w->hc_head().fn, 4, 4 * 256, DType::kF32, "hc_head_fn");
    for (int l = 0; l < 4; ++l) {
      const V4Layer& L = w->layers()[l];
      EXPECT_EQ(L.ratio, c.compress_ratios[l]);
      ExpectShape(L.wq_a, 128, 256, proj, "wq_a");
      ExpectShape(L.wq_b, 4 * 128, 128, proj, "wq_b");
      ExpectShape(L.wkv, 128, 256, proj, "wkv");
      ExpectShape(L.wo_a, 2 * 128, 4 * 128 / 2, proj, "wo_a");
      ExpectShape(L.wo_b, 256, 2 * 128, proj, "wo_b");
      ExpectShape(L.hc_attn.fn, 24, 4 * 256, DType::kF32, "hc_attn_fn");
      ExpectShape(L.gate, 16, 256, DType::kBF16, "gate");
      ASSERT_EQ(L.experts.size(), 16u);
      ExpectShape(L.experts[7].gate, 128, 256, expert, "w1");
      ExpectShape(L.experts[7].down, 256, 128, expert, "w2");
      ExpectShape(L.shared.down, 256, 128, proj, "shared w2");
      EXPECT_EQ(L.tid2eid.size(), l == 0 ? 512u * 4 : 0u);
      EXPECT_EQ(L.gate_bias.size(), l == 0 ? 0u : 16u);
      if (L.ratio != 0) {
        const int64_t cd = V4Config::CompressFactor(L.ratio) * 128;
        ExpectShape(L.compressor.wkv, cd, 256, DType::kBF16, "compressor wkv");
        EXPECT_EQ(L.compressor.ape.size(), static_cast<size_t>(L.ratio * cd));
      }
      if (L.ratio == 4) {
        ExpectShape(L.index_wq_b, 4 * 128, 128, proj, "indexer wq_b");
        ExpectShape(L.index_weights_proj, 4, 256, DType::kBF16, "weights_proj");
        EXPECT_EQ(L.index_compressor.ape.size(), 4u * 256);
      }
    }
  }
}

// Every row of every weight of the two checkpoints decodes to the same floats, and every
// vector (norms, sinks, ape, HC, bias, tid2eid) is equal: they are one model.
TEST_F(V4SyntheticTinyTest, Fp8AndBf16AreTheSameModel) {
  auto a = Load("fp8");
  auto b = Load("bf16");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  int64_t compared = 0, fp4 = 0, fp8 = 0;
  auto same = [&](const WeightView& x, const WeightView& y, const std::string& what) {
    ASSERT_EQ(x.rows, y.rows) << what;
    ASSERT_EQ(x.cols, y.cols) << what;
    fp4 += x.dtype == DType::kF4E2M1;
    fp8 += x.dtype == DType::kF8E4M3;
    std::vector<float> rx(x.cols), ry(y.cols);
    for (int64_t r = 0; r < x.rows; ++r) {
      kernels::DequantizeRow(x, r, 0, x.cols, rx.data());
      kernels::DequantizeRow(y, r, 0, y.cols, ry.data());
      ASSERT_EQ(rx, ry) << what << " row " << r;
    }
    ++compared;
  };
  same(a->embed(), b->embed(), "embed");
  same(a->head(), b->head(), "head");
  same(a->hc_head().fn, b->hc_head().fn, "hc_head_fn");
  EXPECT_EQ(a->norm(), b->norm());
  for (size_t l = 0; l < a->layers().size(); ++l) {
    const V4Layer& x = a->layers()[l];
    const V4Layer& y = b->layers()[l];
    const std::string p = "layer " + std::to_string(l) + " ";
    same(x.wq_a, y.wq_a, p + "wq_a");
    same(x.wq_b, y.wq_b, p + "wq_b");
    same(x.wkv, y.wkv, p + "wkv");
    same(x.wo_a, y.wo_a, p + "wo_a");
    same(x.wo_b, y.wo_b, p + "wo_b");
    same(x.hc_attn.fn, y.hc_attn.fn, p + "hc_attn_fn");
    same(x.gate, y.gate, p + "gate");
    for (size_t e = 0; e < x.experts.size(); ++e) {
      same(x.experts[e].gate, y.experts[e].gate, p + "expert w1");
      same(x.experts[e].down, y.experts[e].down, p + "expert w2");
      same(x.experts[e].up, y.experts[e].up, p + "expert w3");
    }
    same(x.shared.gate, y.shared.gate, p + "shared w1");
    same(x.shared.down, y.shared.down, p + "shared w2");
    same(x.shared.up, y.shared.up, p + "shared w3");
    if (x.ratio != 0) same(x.compressor.wgate, y.compressor.wgate, p + "compressor wgate");
    if (x.ratio == 4) same(x.index_wq_b, y.index_wq_b, p + "indexer wq_b");
    EXPECT_EQ(x.attn_norm, y.attn_norm);
    EXPECT_EQ(x.attn_sink, y.attn_sink);
    EXPECT_EQ(x.hc_ffn.base, y.hc_ffn.base);
    EXPECT_EQ(x.compressor.ape, y.compressor.ape);
    EXPECT_EQ(x.gate_bias, y.gate_bias);
    EXPECT_EQ(x.tid2eid, y.tid2eid);
  }
  EXPECT_EQ(fp4, 4 * 16 * 3);
  EXPECT_GT(fp8, 4 * 8);
  std::printf("%lld matrices identical (%lld FP4, %lld FP8 against their BF16 twins)\n",
              static_cast<long long>(compared), static_cast<long long>(fp4),
              static_cast<long long>(fp8));
}

// The values are not degenerate: decoded weights have about the intended spread, the FP4
// experts use most of the e2m1 grid, and the hash table gives each token distinct experts.
TEST_F(V4SyntheticTinyTest, ValuesArePlausible) {
  auto w = Load("fp8");
  ASSERT_NE(w, nullptr);
  auto rms = [](const WeightView& v) {
    std::vector<float> row(v.cols);
    double s = 0;
    for (int64_t r = 0; r < v.rows; ++r) {
      kernels::DequantizeRow(v, r, 0, v.cols, row.data());
      for (float x : row) s += double{x} * x;
    }
    return std::sqrt(s / (v.rows * v.cols));
  };
  const V4Layer& L = w->layers()[1];
  EXPECT_NEAR(rms(L.wq_a), 1 / std::sqrt(256.0), 0.1 / std::sqrt(256.0));
  EXPECT_NEAR(rms(L.experts[0].down), 1 / std::sqrt(128.0), 0.15 / std::sqrt(128.0));
  EXPECT_NEAR(rms(w->embed()), 1.0, 0.05);
  int nibbles[16] = {};
  const auto* p = static_cast<const uint8_t*>(L.experts[0].gate.data);
  for (int64_t i = 0; i < L.experts[0].gate.DataBytes(); ++i)
    ++nibbles[p[i] & 0xf], ++nibbles[p[i] >> 4];
  int used = 0;
  for (int n : nibbles) used += n > 0;
  EXPECT_GE(used, 13);
  const std::vector<int32_t>& t = w->layers()[0].tid2eid;
  for (size_t r = 0; r < t.size(); r += 4)
    for (int i = 0; i < 4; ++i)
      for (int j = i + 1; j < 4; ++j) ASSERT_NE(t[r + i], t[r + j]) << "token " << r / 4;
  double mean = 0;
  for (float x : L.attn_norm) mean += x;
  EXPECT_NEAR(mean / L.attn_norm.size(), 1.0, 0.02);
}

// Sharding moves tensors between files, never their bytes.
TEST_F(V4SyntheticTinyTest, ShardedEqualsSingleFile) {
  EXPECT_TRUE(fs::exists(Dir("fp8-sharded") + "/model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(Dir("fp8-sharded") + "/model-00003-of-00003.safetensors"));
  auto a = Load("fp8");
  auto b = Load("fp8-sharded");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(a->checkpoint().tensors().size(), b->checkpoint().tensors().size());
  for (const auto& [name, t] : a->checkpoint().tensors()) {
    const TensorInfo* u = b->checkpoint().Find(name);
    ASSERT_NE(u, nullptr) << name;
    ASSERT_EQ(t->num_bytes, u->num_bytes) << name;
    ASSERT_EQ(std::memcmp(t->data, u->data, t->num_bytes), 0) << name;
  }
}

// The writer's dry run lists exactly what it writes.
TEST_F(V4SyntheticTinyTest, DryRunListsTheWrittenTensors) {
  auto w = Load("fp8");
  ASSERT_NE(w, nullptr);
  const std::vector<V4StoredTensor> want = V4CheckpointTensors(w->config(), WeightDType::kFP8);
  ASSERT_EQ(want.size(), w->checkpoint().tensors().size());
  uint64_t bytes = 0;
  for (const V4StoredTensor& s : want) {
    const TensorInfo* t = w->checkpoint().Find(s.name);
    ASSERT_NE(t, nullptr) << s.name;
    EXPECT_EQ(t->dtype, s.dtype) << s.name;
    EXPECT_EQ(t->shape, s.shape) << s.name;
    bytes += t->num_bytes;
  }
  EXPECT_EQ(bytes, V4CheckpointBytes(w->config(), WeightDType::kFP8));
  std::printf("tiny-v4: %.2f MB FP8, %.2f MB BF16\n", bytes / 1e6,
              V4CheckpointBytes(w->config(), WeightDType::kBF16) / 1e6);
}

TEST(V4SyntheticTest, ConfigJsonRoundTrips) {
  for (const std::string& preset : V4PresetNames()) {
    for (WeightDType dtype : {WeightDType::kFP8, WeightDType::kBF16}) {
      const V4Config c = Preset(preset, 0, 1);
      auto p = ParseV4Config(V4ConfigJson(c, dtype), preset);
      ASSERT_TRUE(p.ok()) << p.status().message();
      EXPECT_EQ(p->vocab_size, c.vocab_size);
      EXPECT_EQ(p->hidden_size, c.hidden_size);
      EXPECT_EQ(p->num_layers, c.num_layers);
      EXPECT_EQ(p->num_mtp_layers, 1);
      EXPECT_EQ(p->compress_ratios, c.compress_ratios);
      EXPECT_EQ(p->window, c.window);
      EXPECT_EQ(p->index_topk, c.index_topk);
      EXPECT_EQ(p->num_experts, c.num_experts);
      EXPECT_EQ(p->moe_inter, c.moe_inter);
      EXPECT_EQ(p->num_hash_layers, c.num_hash_layers);
      EXPECT_EQ(p->route_scale, c.route_scale);
      EXPECT_EQ(p->swiglu_limit, c.swiglu_limit);
      EXPECT_EQ(p->rope_factor, c.rope_factor);
      EXPECT_EQ(p->rope_original_len, c.rope_original_len);
      EXPECT_EQ(p->max_position_embeddings, c.max_position_embeddings);
      const bool quant = V4ConfigJson(c, dtype).find("quantization_config") != std::string::npos;
      EXPECT_EQ(quant, dtype == WeightDType::kFP8);
    }
  }
}

TEST(V4SyntheticTest, LayersAndMtpCutTheConfig) {
  V4Config c = Preset("v4-flash", 1);
  EXPECT_EQ(c.num_layers, 1);
  EXPECT_EQ(c.num_mtp_layers, 0);
  EXPECT_EQ(c.num_hash_layers, 1);
  EXPECT_EQ(c.compress_ratios, (std::vector<int>{0}));
  c = Preset("v4-flash", 4, 1);
  EXPECT_EQ(c.compress_ratios, (std::vector<int>{0, 0, 4, 128, 0}));
  EXPECT_EQ(c.num_hash_layers, 3);
  c = Preset("v4-pro");
  EXPECT_EQ(c.num_layers, 61);
  EXPECT_EQ(c.compress_ratios.size(), 61u);
  EXPECT_EQ(c.compress_ratios[0], 128);
  EXPECT_EQ(c.compress_ratios[60], 4);
  auto bad = V4PresetConfig({.preset = "tiny-v4", .num_layers = 5});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "--layers 5: the model has layers 1..4");
  bad = V4PresetConfig({.preset = "tiny-v4", .num_mtp_layers = 2});
  ASSERT_FALSE(bad.ok());
  bad = V4PresetConfig({.preset = "v5"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tiny-v4, v4-flash or v4-pro"), std::string::npos);
}

const V4StoredTensor* FindStored(const std::vector<V4StoredTensor>& t, const std::string& name) {
  for (const V4StoredTensor& s : t)
    if (s.name == name) return &s;
  return nullptr;
}

// V4-Flash at its real shapes without writing it: the full model (MTP included) has the
// 69,187 tensors of the released index (docs/v4-model.md §2), and --layers 1 the stated
// shapes and dtypes.
TEST(V4SyntheticTest, FlashShapesWithoutWriting) {
  EXPECT_EQ(V4CheckpointTensors(Preset("v4-flash", 0, 1), WeightDType::kFP8).size(), 69187u);
  const V4Config c = Preset("v4-flash", 1);
  const auto t = V4CheckpointTensors(c, WeightDType::kFP8);
  EXPECT_EQ(t.size(), 6u + 1565u);
  struct Want {
    const char* name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  for (const Want& w : std::vector<Want>{
           {"embed.weight", DType::kBF16, {129280, 4096}},
           {"hc_head_fn", DType::kF32, {4, 16384}},
           {"layers.0.hc_attn_fn", DType::kF32, {24, 16384}},
           {"layers.0.attn.wq_a.weight", DType::kF8E4M3, {1024, 4096}},
           {"layers.0.attn.wq_a.scale", DType::kF8E8M0, {8, 32}},
           {"layers.0.attn.wq_b.weight", DType::kF8E4M3, {32768, 1024}},
           {"layers.0.attn.wkv.weight", DType::kF8E4M3, {512, 4096}},
           {"layers.0.attn.wo_a.weight", DType::kF8E4M3, {8192, 4096}},
           {"layers.0.attn.wo_b.weight", DType::kF8E4M3, {4096, 8192}},
           {"layers.0.attn.attn_sink", DType::kF32, {64}},
           {"layers.0.ffn.gate.tid2eid", DType::kI64, {129280, 6}},
           {"layers.0.ffn.experts.255.w1.weight", DType::kI8, {2048, 2048}},
           {"layers.0.ffn.experts.255.w1.scale", DType::kF8E8M0, {2048, 128}},
           {"layers.0.ffn.experts.0.w2.weight", DType::kI8, {4096, 1024}},
           {"layers.0.ffn.shared_experts.w2.weight", DType::kF8E4M3, {4096, 2048}},
       }) {
    const V4StoredTensor* s = FindStored(t, w.name);
    ASSERT_NE(s, nullptr) << w.name;
    EXPECT_EQ(s->dtype, w.dtype) << w.name;
    EXPECT_EQ(s->shape, w.shape) << w.name;
  }
  EXPECT_EQ(FindStored(t, "layers.0.ffn.gate.bias"), nullptr);
  EXPECT_EQ(FindStored(t, "layers.0.attn.compressor.ape"), nullptr);
  // A ratio-4 layer's indexer and a ratio-128 layer's compressor (layers 2 and 3).
  const auto t4 = V4CheckpointTensors(Preset("v4-flash", 4), WeightDType::kBF16);
  const V4StoredTensor* s = FindStored(t4, "layers.2.attn.indexer.wq_b.weight");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->dtype, DType::kBF16);
  EXPECT_EQ(s->shape, (std::vector<int64_t>{8192, 1024}));
  s = FindStored(t4, "layers.2.attn.compressor.ape");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->shape, (std::vector<int64_t>{4, 1024}));
  s = FindStored(t4, "layers.3.attn.compressor.ape");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->shape, (std::vector<int64_t>{128, 512}));
  EXPECT_EQ(FindStored(t4, "layers.3.attn.indexer.wq_b.weight"), nullptr);
  EXPECT_EQ(FindStored(t4, "layers.2.ffn.experts.0.w1.scale"), nullptr);  // BF16: no scales
  for (int layers : {1, 4}) {
    const V4Config v = Preset("v4-flash", layers);
    std::printf("v4-flash --layers %d: %.2f GB FP8, %.2f GB BF16\n", layers,
                V4CheckpointBytes(v, WeightDType::kFP8) / 1e9,
                V4CheckpointBytes(v, WeightDType::kBF16) / 1e9);
  }
  std::printf("v4-flash: %.1f GB FP8; v4-pro: %.1f GB FP8\n",
              V4CheckpointBytes(Preset("v4-flash"), WeightDType::kFP8) / 1e9,
              V4CheckpointBytes(Preset("v4-pro"), WeightDType::kFP8) / 1e9);
}

}  // namespace
}  // namespace epserve::v4
