// DeviceWeights::Synthetic: the same seed gives the same bytes and another seed other bytes;
// each kind of tensor has the magnitudes model/synthetic.cc writes; a V2-Lite-shaped model of
// two layers (one dense, one MoE, the real widths) runs a prefill and a decode step on them with
// finite logits; the GPU decode benchmark runs end to end on the tiny preset. The presets'
// layer cut and the expected expert count need no GPU.
#include "model/synthetic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cuda/cuda_model.h"
#include "cuda/decode_bench.h"
#include "cuda/device_weights.h"
#include "cuda/test_util.h"

namespace epserve::cuda {
namespace {

using testing::ToHost;

ModelConfig Preset(const std::string& name, int layers = 0) {
  ModelConfig c = PresetConfig(name).value();
  return layers > 0 ? WithLayers(c, layers).value() : c;
}

std::vector<uint8_t> Bytes(const void* device, int64_t bytes) {
  std::vector<uint8_t> v(bytes);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(v.data(), device, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

// The dequantized values of a device weight.
std::vector<float> Values(const WeightView& w) {
  const std::vector<uint8_t> raw = Bytes(w.data, w.DataBytes());
  std::vector<float> scale;
  if (w.scale) {
    const std::vector<uint8_t> s = Bytes(w.scale, w.ScaleBytes());
    scale.resize(s.size() / 4);
    std::memcpy(scale.data(), s.data(), s.size());
  }
  std::vector<float> v(w.rows * w.cols);
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t c = 0; c < w.cols; ++c) {
      const int64_t i = r * w.cols + c;
      if (w.dtype == DType::kBF16) {
        uint16_t b;
        std::memcpy(&b, &raw[2 * i], 2);
        v[i] = Bf16ToF32(b);
      } else {
        v[i] = Fp8E4M3ToF32(raw[i]) * scale[(r / 128) * w.ScaleCols() + c / 128];
      }
    }
  return v;
}

struct Moments {
  double mean = 0, std = 0, max_abs = 0;
};
Moments Of(const std::vector<float>& v) {
  Moments m;
  for (float x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  for (float x : v) {
    m.std += (x - m.mean) * (x - m.mean);
    m.max_abs = std::max(m.max_abs, std::fabs(static_cast<double>(x)));
  }
  m.std = std::sqrt(m.std / static_cast<double>(v.size()));
  return m;
}

// Uniform values of this mean and standard deviation: the sample's moments within 5 of their
// own standard errors (a uniform's sample std has a relative error of 0.45 / sqrt(n)), plus 1%
// for FP8 rounding; none beyond the interval's edge.
void ExpectUniform(const std::vector<float>& v, double mean, double std, const char* what) {
  const Moments m = Of(v);
  const double n = static_cast<double>(v.size());
  EXPECT_NEAR(m.mean, mean, 5 * std / std::sqrt(n)) << what;
  EXPECT_NEAR(m.std, std, (5 * 0.45 / std::sqrt(n) + 0.01) * std) << what;
  EXPECT_LE(m.max_abs, std::fabs(mean) + std * std::sqrt(3.0) * 1.01 + 1e-6) << what;
}

std::vector<float> Floats(const float* device, int64_t n) {
  const std::vector<uint8_t> b = Bytes(device, n * 4);
  std::vector<float> v(n);
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

TEST(SyntheticWeightsTest, DeterministicWithTheMagnitudesOfMakeModel) {
  EPSERVE_REQUIRE_GPU();
  const ModelConfig c = Preset("tiny");
  for (WeightDType dtype : {WeightDType::kBF16, WeightDType::kFP8}) {
    auto a = DeviceWeights::Synthetic(c, dtype, 7);
    auto b = DeviceWeights::Synthetic(c, dtype, 7);
    auto other = DeviceWeights::Synthetic(c, dtype, 8);
    ASSERT_TRUE(a.ok() && b.ok() && other.ok()) << a.status().message();
    EXPECT_EQ((*a)->bytes, DeviceWeights::SyntheticBytes(c, dtype).value());
    const DeviceLayer& la = (*a)->layers[1];
    const DeviceLayer& lb = (*b)->layers[1];
    const DeviceLayer& lo = (*other)->layers[1];
    ASSERT_TRUE(la.moe);
    const WeightView& down = la.experts[5].down;
    EXPECT_EQ(down.dtype, dtype == WeightDType::kFP8 ? DType::kF8E4M3 : DType::kBF16);
    EXPECT_EQ(Bytes(down.data, down.DataBytes()), Bytes(lb.experts[5].down.data, down.DataBytes()));
    EXPECT_NE(Bytes(down.data, down.DataBytes()), Bytes(lo.experts[5].down.data, down.DataBytes()));
    // Two tensors of one model draw from different streams.
    EXPECT_NE(Bytes(la.experts[5].gate.data, 256), Bytes(la.experts[5].up.data, 256));
    EXPECT_EQ(la.router.dtype, DType::kBF16);
    EXPECT_EQ((*a)->lm_head.dtype, DType::kBF16);

    ExpectUniform(Values(down), 0, 1 / std::sqrt(double(down.cols)), "expert down_proj");
    ExpectUniform(Values(la.q_b), 0, 1 / std::sqrt(double(la.q_b.cols)), "q_b_proj");
    ExpectUniform(Values(la.router), 0, 1 / std::sqrt(double(c.hidden_size)), "router");
    ExpectUniform(Values((*a)->embed), 0, 1.0, "embed_tokens");
    ExpectUniform(Values((*a)->lm_head), 0, 1 / std::sqrt(double(c.hidden_size)), "lm_head");
    ExpectUniform(Floats(la.input_norm, c.hidden_size), 1.0, 0.1, "input_layernorm");
    ASSERT_NE(la.score_bias, nullptr);
    const std::vector<float> bias = Floats(la.score_bias, c.n_routed_experts);
    for (float x : bias) EXPECT_LE(std::fabs(x), 0.02f * std::sqrt(3.0f) * 1.01f);
    EXPECT_EQ((*a)->layers[0].moe, false);
    EXPECT_FALSE((*a)->layers[0].dense.empty());
  }
}

TEST(SyntheticWeightsTest, TwoLayersOfV2LiteGiveFiniteLogits) {
  EPSERVE_REQUIRE_GPU();
  const ModelConfig c = Preset("v2-lite", 2);  // one dense layer, one MoE layer
  ASSERT_TRUE(c.IsMoeLayer(1) && !c.IsMoeLayer(0));
  for (WeightDType dtype : {WeightDType::kBF16, WeightDType::kFP8}) {
    auto w = DeviceWeights::Synthetic(c, dtype, 1);
    ASSERT_TRUE(w.ok()) << w.status().message();
    EXPECT_EQ((*w)->layers[1].experts.size(), 64u);
    EXPECT_TRUE((*w)->layers[1].q_a.empty());  // q_lora_rank null: plain q_proj
    auto model = CudaModel::Create(c, **w, *Use(0));
    ASSERT_TRUE(model.ok()) << model.status().message();
    auto kv = DeviceKvStorage::Create(c.num_hidden_layers, c.kv_a_dim(), 16, 4, KvDType::kBF16);
    ASSERT_TRUE(kv.ok()) << kv.status().message();
    const std::vector<int32_t> blocks = {0, 1, 2, 3};
    ForwardBatch batch;
    batch.chunks.push_back(
        {.tokens = {11, 2000, 99999, 5, 70000}, .start = 0, .blocks = {&blocks[0], 2}});
    batch.chunks.push_back(
        {.tokens = {42}, .sequence_id = 1, .start = 0, .blocks = {&blocks[2], 2}});
    std::vector<float> logits(2 * c.vocab_size);
    for (int step = 0; step < 2; ++step) {
      Status st = (*model)->Forward(batch, (*kv)->view(), logits.data());
      ASSERT_TRUE(st.ok()) << st.message();
      EXPECT_TRUE((*model)->non_finite().empty());
      for (int s = 0; s < 2; ++s) {
        const std::vector<float> row(logits.begin() + s * c.vocab_size,
                                     logits.begin() + (s + 1) * c.vocab_size);
        const Moments m = Of(row);
        EXPECT_GT(m.std, 1e-3) << "step " << step << " seq " << s;
        EXPECT_LT(m.max_abs, 1e4) << "step " << step << " seq " << s;
      }
      for (SequenceChunk& ch : batch.chunks) {  // a decode step next
        ch.start += static_cast<int64_t>(ch.tokens.size());
        ch.tokens = {7};
      }
    }
  }
}

TEST(GpuDecodeBenchTest, RunsOnTheTinyPreset) {
  EPSERVE_REQUIRE_GPU();
  auto r = RunGpuDecodeBench({.config = Preset("tiny"),
                              .batches = {1, 4},
                              .context = 40,
                              .steps = 3,
                              .warmup_steps = 1,
                              .block_size = 16,
                              .bandwidth_gib = 0.25});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->rows.size(), 2u);
  EXPECT_GT(r->hbm_gbps, 0);
  EXPECT_EQ(r->moe_layers, 3);
  for (const GpuDecodeBenchRow& row : r->rows) {
    EXPECT_GT(row.tokens_per_s, 0);
    EXPECT_GT(row.routed_bytes, 0);
    EXPECT_GT(row.lm_head_bytes, 0);
    // A warm-up step at position 40, then 41..43 timed: they read rows 0..41, 0..42, 0..43.
    const double row_bytes = 4.0 * (128 + 16) * 2;  // 4 layers, bf16
    EXPECT_DOUBLE_EQ(row.kv_bytes, row.batch * row_bytes * (42 + 43 + 44) / 3.0);
  }
}

TEST(GpuDecodeBenchTest, ExpectedDistinctExperts) {
  EXPECT_DOUBLE_EQ(ExpectedDistinctExperts(64, 6, 1), 6.0);
  EXPECT_NEAR(ExpectedDistinctExperts(256, 8, 2), 256 * (1 - std::pow(1 - 8 / 256.0, 2)), 1e-9);
  EXPECT_GT(ExpectedDistinctExperts(64, 6, 128), 63.9);
}

TEST(PresetsTest, RealConfigsAndTheirFirstLayers) {
  const ModelConfig v3 = Preset("v3");
  EXPECT_TRUE(v3.Validate("v3").ok());
  EXPECT_EQ(v3.num_hidden_layers, 61);
  const ModelConfig four = Preset("v3", 4);
  EXPECT_EQ(four.num_hidden_layers, 4);
  EXPECT_TRUE(!four.IsMoeLayer(2) && four.IsMoeLayer(3));
  EXPECT_TRUE(Preset("v2-lite").Validate("v2-lite").ok());
  EXPECT_FALSE(WithLayers(v3, 0).ok());
  EXPECT_FALSE(WithLayers(v3, 62).ok());
  // The weights' size without a GPU: V2-Lite is 15.7 B parameters.
  const double v2 = static_cast<double>(
      DeviceWeights::SyntheticBytes(Preset("v2-lite"), WeightDType::kBF16).value());
  EXPECT_NEAR(v2 / 2 / 1e9, 15.7, 0.1);
}

}  // namespace
}  // namespace epserve::cuda
