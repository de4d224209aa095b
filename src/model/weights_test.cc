#include "model/weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "io/checkpoint.h"
#include "kernels/matmul.h"
#include "model/test_util.h"

namespace epserve {
namespace {

Status LoadDir(const std::string& dir) {
  ASSIGN_OR_RETURN(auto ck, Checkpoint::Open(dir));
  ASSIGN_OR_RETURN(auto config, ModelConfig::Parse(ck->config_text(), ck->config_path()));
  ASSIGN_OR_RETURN(auto w, ModelWeights::Load(*ck, config, {}));
  return Status::Ok();
}

void ExpectError(const Status& st, const std::string& what) {
  ASSERT_FALSE(st.ok()) << "expected an error containing: " << what;
  EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
}

TEST(WeightsTest, LoadsEveryPresetAndDtype) {
  for (const char* preset : {"tiny", "tiny-v2"})
    for (WeightDType dt : {WeightDType::kBF16, WeightDType::kFP8}) {
      std::string dir = testing::MakeTiny("load", preset, dt);
      Status st = LoadDir(dir);
      EXPECT_TRUE(st.ok()) << preset << ": " << st.message();
    }
}

TEST(WeightsTest, BindsOnlyWantedExperts) {
  std::string dir = testing::MakeTiny("subset");
  auto ck = Checkpoint::Open(dir);
  auto config = ModelConfig::Parse((*ck)->config_text(), "config.json");
  auto w =
      ModelWeights::Load(**ck, *config, {.want_expert = [](int, int e) { return e % 4 == 1; }});
  ASSERT_TRUE(w.ok()) << w.status().message();
  const auto& experts = (*w)->layers[1].moe->experts;
  EXPECT_TRUE(experts[0].empty());
  EXPECT_FALSE(experts[1].empty());
  EXPECT_FALSE((*w)->mtp[0].layer.moe->experts[5].empty());
  EXPECT_FALSE((*w)->layers[1].moe->shared.empty());
}

// --mtp off (LoadOptions::Mtp::kSkip) binds no MTP tensor, and loads a checkpoint whose
// conversion dropped them while config.json still says num_nextn_predict_layers 1; with MTP on
// that checkpoint is refused, naming the first missing tensor.
TEST(WeightsTest, MtpModuleOnlyWhenAsked) {
  const std::string dir = testing::MakeTiny("no-mtp");
  auto ck = Checkpoint::Open(dir);
  auto config = ModelConfig::Parse((*ck)->config_text(), "config.json");
  ASSERT_EQ(config->num_nextn_predict_layers, 1);
  const std::string mtp_prefix = "model.layers." + std::to_string(config->num_hidden_layers) + ".";
  int64_t mtp_bytes = 0;
  for (const auto& [name, info] : (*ck)->tensors())
    if (name.starts_with(mtp_prefix)) mtp_bytes += static_cast<int64_t>(info->num_bytes);
  ASSERT_GT(mtp_bytes, 0);
  auto skipped = ModelWeights::Load(**ck, *config, {.mtp = LoadOptions::Mtp::kSkip});
  ASSERT_TRUE(skipped.ok()) << skipped.status().message();
  EXPECT_TRUE((*skipped)->mtp.empty());
  EXPECT_EQ((*skipped)->mtp_bytes_not_loaded, mtp_bytes);
  auto full = ModelWeights::Load(**ck, *config, {});
  ASSERT_TRUE(full.ok());
  EXPECT_EQ((*full)->mtp.size(), 1u);
  EXPECT_EQ((*full)->mtp_bytes_not_loaded, 0);
  // The views streamed are the main model's (lm_head last), none of the MTP module's.
  const auto views = (*full)->StreamedViews();
  const auto head = std::find(views.begin(), views.end(), &(*full)->lm_head);
  ASSERT_NE(head, views.end());
  EXPECT_EQ((*skipped)->StreamedViews().size(), static_cast<size_t>(head - views.begin()) + 1);

  ck->reset();
  testing::RewriteCheckpoint(
      dir, [&](testing::EditableTensor& t) { return !t.name.starts_with(mtp_prefix); });
  ck = Checkpoint::Open(dir);
  ASSERT_TRUE(ck.ok());
  skipped = ModelWeights::Load(**ck, *config, {.mtp = LoadOptions::Mtp::kSkip});
  ASSERT_TRUE(skipped.ok()) << skipped.status().message();
  EXPECT_TRUE((*skipped)->mtp.empty());
  EXPECT_EQ((*skipped)->mtp_bytes_not_loaded, 0);
  full = ModelWeights::Load(**ck, *config, {});
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().message(),
            dir + "/model.safetensors: missing tensor " + mtp_prefix +
                "enorm.weight (want [256]), of the MTP module (num_nextn_predict_layers is 1); "
                "--mtp off loads the model without it");
}

// Online re-placement loads an expert after the load and lets go of another: the late one holds
// the bytes a full load binds (copied, mapped or int8 as asked), the released one is unbound.
TEST(WeightsTest, LoadsAndReleasesOneExpertAfterTheLoad) {
  for (WeightDType dt : {WeightDType::kBF16, WeightDType::kFP8}) {
    const std::string dir = testing::MakeTiny("late", "tiny", dt);
    auto ck = Checkpoint::Open(dir);
    auto config = ModelConfig::Parse((*ck)->config_text(), "config.json");
    auto full = ModelWeights::Load(**ck, *config, {});
    for (LoadOptions::Memory memory :
         {LoadOptions::Memory::kCopied, LoadOptions::Memory::kMapped}) {
      const LoadOptions opt{.want_expert = [](int, int e) { return e != 3; }, .memory = memory};
      auto w = ModelWeights::Load(**ck, *config, opt);
      ASSERT_TRUE(full.ok() && w.ok());
      ASSERT_TRUE((*w)->layers[2].moe->experts[3].empty());
      auto e = LoadExpert(**ck, *config, 2, 3, opt);
      ASSERT_TRUE(e.ok()) << e.status().message();
      EXPECT_GT(e->bytes, 0);
      InstallExpert(**w, std::move(*e));
      const MlpWeights& got = (*w)->layers[2].moe->experts[3];
      const MlpWeights& want = (*full)->layers[2].moe->experts[3];
      for (auto [a, b] :
           {std::pair{&got.gate, &want.gate}, {&got.up, &want.up}, {&got.down, &want.down}}) {
        ASSERT_EQ(a->dtype, b->dtype);
        ASSERT_EQ(a->DataBytes(), b->DataBytes());
        EXPECT_EQ(std::memcmp(a->data, b->data, a->DataBytes()), 0);
        if (a->ScaleBytes() > 0) {
          EXPECT_EQ(std::memcmp(a->scale, b->scale, a->ScaleBytes()), 0);
        }
      }
      EXPECT_EQ((*w)->late_experts.size(), memory == LoadOptions::Memory::kCopied ? 1u : 0u);
      EXPECT_GT(ReleaseExpert(**w, 2, 3), 0);
      EXPECT_TRUE((*w)->layers[2].moe->experts[3].empty());
      EXPECT_TRUE((*w)->late_experts.empty());
      EXPECT_GT(ReleaseExpert(**w, 2, 5), 0);  // one bound at load
      EXPECT_TRUE((*w)->layers[2].moe->experts[5].empty());
      EXPECT_FALSE((*w)->layers[2].moe->experts[6].empty());
    }
    auto i8 = LoadExpert(**ck, *config, 1, 0, {.requant = LoadOptions::Requant::kInt8});
    ASSERT_TRUE(i8.ok());
    EXPECT_EQ(i8->weights.down.dtype, DType::kI8Packed);
    EXPECT_FALSE(LoadExpert(**ck, *config, 0, 0, {}).ok());   // a dense layer
    EXPECT_FALSE(LoadExpert(**ck, *config, 1, 99, {}).ok());  // no such expert
  }
}

// --requant int8: every streamed projection but kv_b and the router becomes int8, each element
// within half a step of its block scale of the value it had; the others are left as they were.
TEST(WeightsTest, RequantInt8PacksTheProjections) {
  for (WeightDType dt : {WeightDType::kBF16, WeightDType::kFP8}) {
    const std::string dir = testing::MakeTiny("requant", "tiny", dt);
    auto ck = Checkpoint::Open(dir);
    auto config = ModelConfig::Parse((*ck)->config_text(), "config.json");
    auto plain = ModelWeights::Load(**ck, *config, {});
    auto int8 = ModelWeights::Load(**ck, *config, {.requant = LoadOptions::Requant::kInt8});
    ASSERT_TRUE(plain.ok() && int8.ok());
    const std::vector<const WeightView*> a = (*plain)->StreamedViews(),
                                         b = (*int8)->StreamedViews();
    ASSERT_EQ(a.size(), b.size());
    int packed = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const bool kept = b[i] == &(*int8)->layers[0].attn.kv_b ||
                        b[i] == &(*int8)->mtp[0].layer.attn.kv_b ||
                        ((*int8)->layers[1].moe && b[i] == &(*int8)->layers[1].moe->router);
      if (b[i]->dtype != DType::kI8Packed) {
        EXPECT_EQ(b[i]->dtype, a[i]->dtype) << i;
        continue;
      }
      EXPECT_FALSE(kept) << i;
      ++packed;
      ASSERT_EQ(b[i]->rows, a[i]->rows);
      ASSERT_EQ(b[i]->cols, a[i]->cols);
      std::vector<float> x(a[i]->cols), q(a[i]->cols);
      for (int64_t r = 0; r < a[i]->rows; r += 7) {
        kernels::DequantizeRow(*a[i], r, 0, a[i]->cols, x.data());
        kernels::DequantizeRow(*b[i], r, 0, a[i]->cols, q.data());
        for (int64_t k = 0; k < a[i]->cols; ++k) {
          const float s = b[i]->scale[((r / 16) * b[i]->ScaleCols() + k / 128) * 16 + r % 16];
          ASSERT_LE(std::fabs(q[k] - x[k]), 0.5001f * s) << i << " " << r << " " << k;
        }
      }
    }
    // All but kv_b (every layer and the MTP module's) and the routers.
    int kept = 0;
    for (const LayerWeights& l : (*int8)->layers) kept += 1 + (l.moe ? 1 : 0);
    kept += 2;  // the MTP layer's kv_b and router
    EXPECT_EQ(packed + kept, static_cast<int>(b.size()));
    EXPECT_EQ((*int8)->lm_head.dtype, DType::kI8Packed);
    EXPECT_EQ((*int8)->layers[0].attn.kv_b.dtype, (*plain)->layers[0].attn.kv_b.dtype);
  }
}

TEST(WeightsTest, MissingTensor) {
  std::string dir = testing::MakeTiny("missing");
  testing::RewriteCheckpoint(dir, [](testing::EditableTensor& t) {
    return t.name != "model.layers.2.mlp.experts.7.up_proj.weight";
  });
  ExpectError(LoadDir(dir), "missing tensor model.layers.2.mlp.experts.7.up_proj.weight");
}

TEST(WeightsTest, ExtraTensor) {
  std::string dir = testing::MakeTiny("extra");
  testing::RewriteCheckpoint(dir, [](testing::EditableTensor&) { return true; },
                             {{"model.layers.1.self_attn.rotary_emb.inv_freq",
                               DType::kF32,
                               {8},
                               std::vector<uint8_t>(32)}});
  ExpectError(
      LoadDir(dir),
      "model.safetensors: tensor model.layers.1.self_attn.rotary_emb.inv_freq: unexpected tensor");
}

TEST(WeightsTest, WrongShape) {
  std::string dir = testing::MakeTiny("shape");
  testing::RewriteCheckpoint(dir, [](testing::EditableTensor& t) {
    if (t.name == "model.layers.0.self_attn.kv_b_proj.weight") {
      t.shape = {t.shape[1], t.shape[0]};
    }
    return true;
  });
  ExpectError(
      LoadDir(dir),
      "tensor model.layers.0.self_attn.kv_b_proj.weight: shape [128, 256], want [256, 128]");
}

TEST(WeightsTest, WrongDtype) {
  std::string dir = testing::MakeTiny("dtype");
  testing::RewriteCheckpoint(dir, [](testing::EditableTensor& t) {
    if (t.name == "model.norm.weight") {  // a norm in FP8: same element count, other bytes
      t.dtype = DType::kF8E4M3;
      t.bytes.resize(t.bytes.size() / 2);
    }
    return true;
  });
  ExpectError(LoadDir(dir), "tensor model.norm.weight: dtype F8_E4M3 is not allowed here");
}

// DeepSeek-V4's storage types (the reader takes them for V4's loader) are refused by name.
TEST(WeightsTest, V4StorageTypesAreRefused) {
  std::string dir = testing::MakeTiny("v4dtype");
  testing::RewriteCheckpoint(dir, [](testing::EditableTensor& t) {
    if (t.name == "model.layers.0.self_attn.o_proj.weight") {  // packed FP4 bytes, as V4 stores
      t.dtype = DType::kI8;
      t.bytes.resize(t.bytes.size() / 2);
    }
    return true;
  });
  ExpectError(LoadDir(dir),
              "tensor model.layers.0.self_attn.o_proj.weight: dtype I8 is not allowed here (want "
              "F8_E4M3, BF16 or F32)");

  dir = testing::MakeTiny("v4dtype_norm");
  testing::RewriteCheckpoint(dir, [](testing::EditableTensor& t) {
    if (t.name == "model.norm.weight") {  // an index table's type
      t.dtype = DType::kI64;
      t.bytes.resize(t.bytes.size() * 4);
    }
    return true;
  });
  ExpectError(LoadDir(dir),
              "tensor model.norm.weight: dtype I64 is not allowed here (want BF16 or F32)");

  dir = testing::MakeTiny("v4dtype_scale", "tiny", WeightDType::kFP8);
  testing::RewriteCheckpoint(dir, [](testing::EditableTensor& t) {
    if (t.name == "model.layers.1.self_attn.o_proj.weight_scale_inv") {  // UE8M0, as V4's
      t.dtype = DType::kF8E8M0;
      t.bytes.resize(t.bytes.size() / 4);
    }
    return true;
  });
  ExpectError(LoadDir(dir),
              "tensor model.layers.1.self_attn.o_proj.weight_scale_inv: dtype F8_E8M0, want F32");
}

TEST(WeightsTest, Fp8WithoutScales) {
  std::string dir = testing::MakeTiny("noscale", "tiny", WeightDType::kFP8);
  testing::RewriteCheckpoint(dir, [](testing::EditableTensor& t) {
    return t.name != "model.layers.1.self_attn.o_proj.weight_scale_inv";
  });
  ExpectError(LoadDir(dir),
              "tensor model.layers.1.self_attn.o_proj.weight: F8_E4M3 weight without "
              "model.layers.1.self_attn.o_proj.weight_scale_inv");
}

TEST(WeightsTest, MissingMtpTensor) {
  std::string dir = testing::MakeTiny("mtp");
  testing::RewriteCheckpoint(
      dir, [](testing::EditableTensor& t) { return t.name != "model.layers.4.eh_proj.weight"; });
  ExpectError(LoadDir(dir), "missing tensor model.layers.4.eh_proj.weight");
}

}  // namespace
}  // namespace epserve
