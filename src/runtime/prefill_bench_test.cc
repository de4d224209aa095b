#include "runtime/prefill_bench.h"

#include <gtest/gtest.h>

#include "model/test_util.h"
#include "runtime/loaded_model.h"

namespace epserve {
namespace {

// The projections' work per prefill, counted from the config by hand (not from the weights the
// benchmark walks), the runs it reports and the phases it splits them into.
TEST(PrefillBenchTest, CountsTheWorkAndReportsEveryRun) {
  const std::string dir = testing::MakeTiny("prefill_bench", "tiny", WeightDType::kFP8);
  auto loaded = LoadModel(dir, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const ModelConfig& c = (*loaded)->config;
  ThreadPool pool(2);
  const int tokens = 11;
  for (int step : {0, 4}) {
    SCOPED_TRACE(step);
    auto r = RunPrefillBench(**loaded, pool, {.tokens = tokens, .step_tokens = step, .repeats = 2});
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_EQ(r->seconds.size(), 2u);
    double mean = 0;
    for (double s : r->seconds) {
      EXPECT_GT(s, 0);
      mean += tokens / s / 2;
    }
    EXPECT_NEAR(r->mean_tokens_per_s, mean, 1e-9 * mean);
    EXPECT_GE(r->stddev_tokens_per_s, 0);
    const StepTimes& p = r->phase_ms;
    for (double v : {p.gemm, p.attention, p.gate, p.shared_expert, p.routed_experts, p.lm_head})
      EXPECT_GE(v, 0);
    EXPECT_GT(p.routed_experts, 0);
    // The phases are parts of the runs (ms per run against the mean run).
    EXPECT_LE(p.gemm + p.attention + p.gate + p.shared_expert + p.routed_experts + p.lm_head,
              1e3 * (r->seconds[0] + r->seconds[1]) / 2 * 1.01);

    const double H = c.hidden_size, heads = c.num_attention_heads, L = c.kv_lora_rank,
                 R = c.qk_rope_head_dim;
    const double qhd = c.qk_nope_head_dim + R;
    const double attn = H * c.q_lora_rank + c.q_lora_rank * heads * qhd + H * (L + R) +
                        L * heads * (c.qk_nope_head_dim + c.v_head_dim) + heads * c.v_head_dim * H;
    const double expert = 3 * H * c.moe_intermediate_size;
    const int moe_layers = c.num_hidden_layers - c.first_k_dense_replace;
    const double macs =
        c.num_hidden_layers * attn + c.first_k_dense_replace * 3 * H * c.intermediate_size +
        moe_layers *
            (H * c.n_routed_experts + c.n_shared_experts * expert + c.num_experts_per_tok * expert);
    EXPECT_DOUBLE_EQ(r->matmul_flops, 2.0 * tokens * macs);
  }
}

TEST(PrefillBenchTest, RejectsPromptsLongerThanTheContext) {
  const std::string dir = testing::MakeTiny("prefill_bench_ctx", "tiny", WeightDType::kFP8);
  auto loaded = LoadModel(dir, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  ThreadPool pool(1);
  const int context = (*loaded)->config.max_position_embeddings;
  auto r = RunPrefillBench(**loaded, pool, {.tokens = context});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--tokens " + std::to_string(context)), std::string::npos)
      << r.status().message();
  EXPECT_FALSE(RunPrefillBench(**loaded, pool, {.tokens = 4, .repeats = 0}).ok());
}

}  // namespace
}  // namespace epserve
