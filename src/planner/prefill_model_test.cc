// The prefill model against the roofline worked out by hand: every formula below is written
// out here (kernel shapes, FLOPs, bytes, routing probabilities), not taken from the model's
// code; only the hardware and efficiency numbers are read from the data files.
#include "planner/prefill_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "planner/test_util.h"

namespace epserve::planner {
namespace {

using testing::Efficiency;
using testing::Gpu;
using testing::Model;

// time = overhead + max(flops / (compute * peak), bytes / (memory * bandwidth)), in us.
double Roof(double flops, double bytes, double peak, double bandwidth, const KernelEfficiency& e) {
  const double compute_s = peak > 0 ? flops / (e.compute * peak) : 0;
  return e.overhead_us + std::max(compute_s, bytes / (e.memory * bandwidth)) * 1e6;
}

// C(a, 8) / C(b, 8).
double Choose8Ratio(double a, double b) {
  double r = 1;
  for (int i = 0; i < 8; ++i) r *= (a - i) / (b - i);
  return r;
}

class HandRooflineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = Model("deepseek-v3");
    eff_ = Efficiency();
  }

  // [m,k] x [k,n], FP8 weights and activations (1 byte), dense FP8 peak.
  double Fp8Gemm(const HardwareSpec& hw, double m, double k, double n,
                 const KernelEfficiency& e) const {
    return Roof(2 * m * k * n, m * k + n * k + m * n, hw.fp8_tflops * 1e12,
                hw.memory_bandwidth_tbs * 1e12, e);
  }
  double Fp8GroupGemm(const HardwareSpec& hw, double g, double m, double k, double n) const {
    return Roof(2 * g * m * k * n, g * (m * k + n * k + m * n), hw.fp8_tflops * 1e12,
                hw.memory_bandwidth_tbs * 1e12, eff_.group_gemm);
  }
  double Stream(const HardwareSpec& hw, double bytes) const {
    return Roof(0, bytes, 0, hw.memory_bandwidth_tbs * 1e12, eff_.elementwise);
  }
  // Causal MHA over one segment: t queries after p cached tokens, 128/TP heads of qk 192, v 128.
  double Attention(const HardwareSpec& hw, double heads, double t, double p) const {
    const double flops = 2 * heads * (192 + 128) * (t * p + t * (t + 1) / 2);
    const double bytes = heads * (t + p + t) * (192 + 128) * 2;
    return Roof(flops, bytes, hw.bf16_tflops * 1e12, hw.memory_bandwidth_tbs * 1e12,
                eff_.prefill_attention);
  }
  // Dispatch or combine: rows split into NVLink and InfiniBand parts, which run in parallel.
  double Exchange(const HardwareSpec& hw, const CommEfficiency& e, double nvlink_bytes,
                  double ib_bytes) const {
    const double nvlink =
        hw.nvlink_latency_us + nvlink_bytes / (e.nvlink * hw.nvlink_gbs * 1e9) * 1e6;
    const double ib =
        hw.infiniband_latency_us + ib_bytes / (e.infiniband * hw.infiniband_gbs * 1e9) * 1e6;
    return e.overhead_us + std::max(nvlink, ib);
  }

  ModelSpec model_;
  EfficiencyFactors eff_;
};

void ExpectKernel(const LayerBreakdown& layer, const std::string& name, double hand_us) {
  const double model_us = layer.KernelUs(name);
  std::printf("  %-20s model %10.2f us  hand %10.2f us\n", name.c_str(), model_us, hand_us);
  EXPECT_NEAR(model_us, hand_us, 1e-6 * hand_us) << name;
}

// Shape 1: H800, EP32 DP32 TP1 on 4 machines, every group prefills one 1024-token prompt in one
// pass, no overlap, no MTP.
TEST_F(HandRooflineTest, H800Ep32OnePromptOf1024Tokens) {
  const HardwareSpec hw = Gpu("H800");
  StatusOr<Deployment> d = MakeDeployment(model_, 32, 1, 8);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  StatusOr<RoutingModel> routing = RoutingModel::Uniform(model_, 32, 8);
  ASSERT_TRUE(routing.ok());
  const PlanContext ctx{.hw = &hw, .model = &model_, .eff = &eff_, .routing = &*routing};
  StatusOr<PrefillEstimate> est = EstimatePrefill(
      ctx, *d,
      {.prompt_lens = {1024}, .overlap = OverlapMode::kNone, .mtp = MtpPrefill::kWithoutMtp});
  ASSERT_TRUE(est.ok()) << est.status().ToString();
  ASSERT_EQ(est->passes.size(), 1u);
  const LayerBreakdown& moe = est->passes[0].moe_layer;

  const double T = 1024, h = 7168;
  const KernelEfficiency& gemm = eff_.gemm;
  std::map<std::string, double> hand;
  hand["input_norm"] = Stream(hw, T * h * 4);
  hand["qkv_a_proj"] = Fp8Gemm(hw, T, h, 1536 + 512 + 64, gemm);
  hand["qkv_a_norm"] = Stream(hw, T * (1536 + 512) * 4);
  hand["q_b_proj"] = Fp8Gemm(hw, T, 1536, 128 * 192, gemm);
  hand["kv_b_proj"] = Fp8Gemm(hw, T, 512, 128 * (128 + 128), gemm);  // no prefix yet
  hand["rope_append_kv"] = Stream(hw, T * (128 * 64 + 576) * 4);
  hand["prefill_attention"] = Attention(hw, 128, T, 0);
  hand["o_proj"] = Fp8Gemm(hw, T, 128 * 128, h, gemm);
  hand["post_norm"] = Stream(hw, T * h * 4);
  // The gate is a BF16 GEMM: 2 bytes per element, BF16 peak.
  hand["gate"] = Roof(2 * T * h * 256, (T * h + 256 * h + T * 256) * 2, hw.bf16_tflops * 1e12,
                      hw.memory_bandwidth_tbs * 1e12, gemm);
  hand["shared_gate_up"] = Fp8Gemm(hw, T, h, 2 * 2048, gemm);
  hand["shared_act"] = Stream(hw, T * 2048 * 5);
  hand["shared_down"] = Fp8Gemm(hw, T, 2048, h, gemm);
  // 32 groups x 1024 tokens x 8 experts over 256 experts: each rank's 8 experts get
  // 32768 * 8 / 256 = 1024 rows each; every one is touched (1 - (31/32)^32768 = 1 to 1e-400).
  const double rows_per_expert = 32 * T * 8 / 256;
  EXPECT_NEAR(moe.tokens_per_expert, rows_per_expert, 1e-9);
  EXPECT_NEAR(moe.touched_experts, 8, 1e-9);
  hand["group_gemm_gate_up"] = Fp8GroupGemm(hw, 8, rows_per_expert, h, 2 * 2048);
  hand["expert_act"] = Stream(hw, 8 * rows_per_expert * 2048 * 5);
  hand["group_gemm_down"] = Fp8GroupGemm(hw, 8, rows_per_expert, 2048, h);
  // A rank's 8 experts are a quarter of one expert group. A token keeps 4 of 8 groups, then
  // picks 8 of their 128 experts: P(hit) = 1/2 x (1 - C(120,8)/C(128,8)).
  const double hit = 0.5 * (1 - Choose8Ratio(120, 128));
  const double destinations = 32 * hit;
  EXPECT_NEAR(moe.destinations_per_token, destinations, 1e-9);
  hand["combine_reduce"] = Stream(hw, T * (destinations + 1) * h * 2);
  double compute = 0;
  for (const auto& [name, us] : hand) {
    ExpectKernel(moe, name, us);
    compute += us;
  }
  EXPECT_EQ(moe.kernels.size(), hand.size());  // nothing else (no BMMs, no decode attention)
  // Rows sent = rows received = 1024 x destinations; 7 of the other 31 ranks share the machine.
  const double rows = T * destinations;
  const double dispatch_row = h + h / 128 * 4;  // FP8 + one fp32 scale per 128
  const double combine_row = 2 * h;             // BF16
  const double dispatch =
      Exchange(hw, eff_.dispatch, rows * 7 / 32 * dispatch_row, rows * 24 / 32 * dispatch_row);
  const double combine =
      Exchange(hw, eff_.combine, rows * 7 / 32 * combine_row, rows * 24 / 32 * combine_row);
  std::printf("  dispatch model %.2f hand %.2f; combine model %.2f hand %.2f\n",
              moe.dispatch.visible_us, dispatch, moe.combine.visible_us, combine);
  EXPECT_NEAR(moe.dispatch.visible_us, dispatch, 1e-6 * dispatch);
  EXPECT_NEAR(moe.combine.visible_us, combine, 1e-6 * combine);
  const double layer = compute + dispatch + combine;
  std::printf("  MoE layer model %.2f hand %.2f us\n", moe.total_us, layer);
  EXPECT_NEAR(moe.total_us, layer, 1e-6 * layer);

  // The whole prefill: 3 dense layers (attention + the 18432-wide MLP), 58 MoE layers, the LM
  // head on the prompt's last token (BF16, 129280 columns), the per-pass overhead.
  double dense = 0;
  for (const char* name : {"input_norm", "qkv_a_proj", "qkv_a_norm", "q_b_proj", "kv_b_proj",
                           "rope_append_kv", "prefill_attention", "o_proj", "post_norm"}) {
    dense += hand[name];
  }
  dense += Fp8Gemm(hw, T, h, 2 * 18432, gemm) + Stream(hw, T * 18432 * 5) +
           Fp8Gemm(hw, T, 18432, h, gemm);
  const double lm_head = Roof(2 * 1 * h * 129280, (1 * h + 129280 * h + 129280) * 2,
                              hw.bf16_tflops * 1e12, hw.memory_bandwidth_tbs * 1e12, gemm);
  const double total = 3 * dense + 58 * layer + lm_head + eff_.step_overhead_us;
  std::printf("  prefill model %.1f hand %.1f us\n", est->total_us, total);
  EXPECT_NEAR(est->passes[0].dense_layer.total_us, dense, 1e-6 * dense);
  EXPECT_NEAR(est->total_us, total, 1e-6 * total);
  EXPECT_NEAR(est->tokens_per_s_per_gpu, 32 * T / (total * 1e-6) / 32, 1e-6);
}

// Shape 2: H100, EP16 DP8 TP2 on 2 machines, a 3000-token prompt in chunks of 2048: the second
// pass computes 952 tokens after a 2048-token prefix, which kv_b_proj expands again.
TEST_F(HandRooflineTest, H100Ep16Tp2SecondChunkOfA3000TokenPrompt) {
  const HardwareSpec hw = Gpu("H100");
  StatusOr<Deployment> d = MakeDeployment(model_, 16, 2, 8);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  StatusOr<RoutingModel> routing = RoutingModel::Uniform(model_, 16, 8);
  ASSERT_TRUE(routing.ok());
  const PlanContext ctx{.hw = &hw, .model = &model_, .eff = &eff_, .routing = &*routing};
  StatusOr<PrefillEstimate> est = EstimatePrefill(ctx, *d,
                                                  {.prompt_lens = {3000},
                                                   .chunk_tokens = 2048,
                                                   .overlap = OverlapMode::kNone,
                                                   .mtp = MtpPrefill::kWithoutMtp});
  ASSERT_TRUE(est.ok()) << est.status().ToString();
  ASSERT_EQ(est->passes.size(), 2u);
  ASSERT_EQ(est->passes[1].segments.size(), 1u);
  EXPECT_EQ(est->passes[1].segments[0].tokens, 952);
  EXPECT_EQ(est->passes[1].segments[0].prefix, 2048);
  EXPECT_EQ(est->passes[0].finished_prompts, 0);
  EXPECT_EQ(est->passes[1].finished_prompts, 1);
  const LayerBreakdown& moe = est->passes[1].moe_layer;

  const double t = 952, prefix = 2048, h = 7168, heads = 64;  // 128 heads over TP2
  const KernelEfficiency& gemm = eff_.gemm;
  ExpectKernel(moe, "qkv_a_proj", Fp8Gemm(hw, t, h, 2112, gemm));
  ExpectKernel(moe, "q_b_proj", Fp8Gemm(hw, t, 1536, heads * 192, gemm));
  ExpectKernel(moe, "kv_b_proj", Fp8Gemm(hw, prefix + t, 512, heads * 256, gemm));
  ExpectKernel(moe, "prefill_attention", Attention(hw, heads, t, prefix));
  ExpectKernel(moe, "o_proj", Fp8Gemm(hw, t, heads * 128, h, gemm));
  // Ring all-reduce of the attention output over the 2 TP ranks (NVLink).
  const double all_reduce_bytes = 2.0 * (2 - 1) / 2 * t * h * 2;
  ExpectKernel(moe, "tp_all_reduce",
               eff_.tp_collective.overhead_us + hw.nvlink_latency_us +
                   all_reduce_bytes / (eff_.tp_collective.nvlink * hw.nvlink_gbs * 1e9) * 1e6);
  // The MoE part: each TP rank takes half of its group's 952 tokens.
  const double rank_tokens = t / 2;
  ExpectKernel(moe, "shared_gate_up", Fp8Gemm(hw, rank_tokens, h, 4096, gemm));
  // 8 groups x 952 tokens; a rank holds 16 experts, each picked with probability 8/256.
  const double total_tokens = 8 * t;
  const double touched = 16 * (1 - std::pow(1 - 8.0 / 256, total_tokens));
  const double m = total_tokens * 8 / 256 * 16 / touched;
  ExpectKernel(moe, "group_gemm_gate_up", Fp8GroupGemm(hw, touched, m, h, 4096));
  ExpectKernel(moe, "group_gemm_down", Fp8GroupGemm(hw, touched, m, 2048, h));
  // A rank's 16 experts are half of one group: P(hit) = 1/2 x (1 - C(112,8)/C(128,8)).
  const double hit = 0.5 * (1 - Choose8Ratio(112, 128));
  const double rows = rank_tokens * 16 * hit;
  const double dispatch_row = h + h / 128 * 4;
  const double dispatch =
      Exchange(hw, eff_.dispatch, rows * 7 / 16 * dispatch_row, rows * 8 / 16 * dispatch_row);
  EXPECT_NEAR(moe.dispatch.visible_us, dispatch, 1e-6 * dispatch);

  // Chunking keeps the attention's (query, key) pairs: 3000 x 3001 / 2 over the two passes ...
  double flops = 0;
  for (const PrefillPass& p : est->passes) {
    for (const KernelTime& k : p.moe_layer.kernels) {
      if (k.name == "prefill_attention") flops += k.cost.flops;
    }
  }
  EXPECT_NEAR(flops, 2 * heads * 320 * (3000.0 * 3001 / 2), 1e-6 * flops);
  // ... but re-expands the first chunk's latents in the second pass.
  StatusOr<PrefillEstimate> whole = EstimatePrefill(
      ctx, *d,
      {.prompt_lens = {3000}, .overlap = OverlapMode::kNone, .mtp = MtpPrefill::kWithoutMtp});
  ASSERT_TRUE(whole.ok());
  double kv_b_chunked = 0;
  for (const PrefillPass& p : est->passes) {
    for (const KernelTime& k : p.moe_layer.kernels) {
      if (k.name == "kv_b_proj") kv_b_chunked += k.cost.flops;
    }
  }
  const double kv_b_whole = 2.0 * 3000 * 512 * heads * 256;
  EXPECT_NEAR(kv_b_chunked, kv_b_whole * (2048.0 + 3000) / 3000, 1e-6 * kv_b_whole);
  EXPECT_GT(est->total_us, whole->total_us);  // chunks cost: weights read twice, prefix again
}

TEST_F(HandRooflineTest, TimeToFirstTokenIsAnMd1QueueInFrontOfTheService) {
  const HardwareSpec hw = Gpu("H800");
  StatusOr<Deployment> d = MakeDeployment(model_, 32, 1, 8);
  ASSERT_TRUE(d.ok());
  StatusOr<RoutingModel> routing = RoutingModel::Uniform(model_, 32, 8);
  ASSERT_TRUE(routing.ok());
  const PlanContext ctx{.hw = &hw, .model = &model_, .eff = &eff_, .routing = &*routing};
  const double rate = 40;  // prompts/s over the deployment: 1.25 per DP group
  StatusOr<TtftEstimate> ttft =
      EstimateTtft(ctx, *d, {.prompt_len = 1024, .rate = rate, .extra_us = 500});
  ASSERT_TRUE(ttft.ok()) << ttft.status().ToString();
  ASSERT_TRUE(ttft->stable);
  const double rho = rate / 32 * ttft->service_us * 1e-6;
  EXPECT_NEAR(ttft->utilization, rho, 1e-12);
  EXPECT_NEAR(ttft->wait_us, rho * ttft->service_us / (2 * (1 - rho)), 1e-6);
  EXPECT_NEAR(ttft->ttft_us, ttft->wait_us + ttft->service_us + 500, 1e-6);
  // The served prompt's company: itself plus rho of the other 31 groups, rounded up.
  EXPECT_EQ(ttft->busy_groups, static_cast<int>(std::ceil(1 + rho * 31 - 1e-9)));
  // The service is the prefill with exactly that many groups busy.
  StatusOr<PrefillEstimate> alone =
      EstimatePrefill(ctx, *d, {.prompt_lens = {1024}, .busy_groups = ttft->busy_groups});
  ASSERT_TRUE(alone.ok());
  EXPECT_NEAR(ttft->service_us, alone->total_us, 1e-6);
  // Fewer busy groups, fewer expert rows: never slower than all 32 busy.
  StatusOr<PrefillEstimate> all = EstimatePrefill(ctx, *d, {.prompt_lens = {1024}});
  ASSERT_TRUE(all.ok());
  EXPECT_LE(ttft->service_us, all->total_us);
  // Past saturation there is no steady state.
  StatusOr<TtftEstimate> overloaded =
      EstimateTtft(ctx, *d, {.prompt_len = 1024, .rate = 2 * 32 / (all->total_us * 1e-6)});
  ASSERT_TRUE(overloaded.ok());
  EXPECT_FALSE(overloaded->stable);
  EXPECT_TRUE(std::isinf(overloaded->ttft_us));
}

TEST_F(HandRooflineTest, BadInputsAreErrorsNamingTheFlag) {
  const HardwareSpec hw = Gpu("H800");
  StatusOr<Deployment> d = MakeDeployment(model_, 32, 1, 8);
  ASSERT_TRUE(d.ok());
  StatusOr<RoutingModel> routing = RoutingModel::Uniform(model_, 32, 8);
  ASSERT_TRUE(routing.ok());
  const PlanContext ctx{.hw = &hw, .model = &model_, .eff = &eff_, .routing = &*routing};
  StatusOr<PrefillEstimate> none = EstimatePrefill(ctx, *d, {});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--prompt-lens"), std::string::npos);
  StatusOr<PrefillEstimate> huge = EstimatePrefill(ctx, *d, {.prompt_lens = {2000000}});
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("KV cache"), std::string::npos) << huge.status().message();
}

}  // namespace
}  // namespace epserve::planner
