#include "runtime/decode_bench.h"

#include <gtest/gtest.h>

#include "model/test_util.h"
#include "runtime/loaded_model.h"

namespace epserve {
namespace {

// The work a decode step does, counted from the config by hand (not from the weights the
// benchmark walks): the tiny preset has q_lora, one dense layer and MoE layers after it.
TEST(DecodeBenchTest, CountsTheStepsBytesAndFlops) {
  const std::string dir = testing::MakeTiny("decode_bench", "tiny", WeightDType::kFP8);
  auto loaded = LoadModel(dir, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const ModelConfig& c = (*loaded)->config;
  ThreadPool pool(2);
  const int prompt = 5, steps = 3, batch = 3;
  auto rows = RunDecodeBench(**loaded, pool, {.batches = {batch}, .prompt_len = prompt, .decode_steps = steps});
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 1u);
  const DecodeBenchRow& r = (*rows)[0];

  const double H = c.hidden_size, heads = c.num_attention_heads, L = c.kv_lora_rank, R = c.qk_rope_head_dim;
  const double qhd = c.qk_nope_head_dim + R;
  const double attn = H * c.q_lora_rank + c.q_lora_rank * heads * qhd + H * (L + R) +
                      L * heads * (c.qk_nope_head_dim + c.v_head_dim) + heads * c.v_head_dim * H;
  const double expert = 3 * H * c.moe_intermediate_size;
  const int moe_layers = c.num_hidden_layers - c.first_k_dense_replace;
  const double dense_macs = c.vocab_size * H + c.num_hidden_layers * attn +
                            c.first_k_dense_replace * 3 * H * c.intermediate_size +
                            moe_layers * (H * c.n_routed_experts + c.n_shared_experts * expert);
  EXPECT_DOUBLE_EQ(r.dense_flops_per_step, 2 * batch * dense_macs);
  EXPECT_DOUBLE_EQ(r.routed_flops_per_step, 2.0 * batch * c.num_experts_per_tok * moe_layers * expert);
  // Step s attends over prompt + s + 1 positions per sequence.
  double positions = 0;
  for (int s = 0; s < steps; ++s) positions += batch * (prompt + s + 1);
  EXPECT_DOUBLE_EQ(r.attention_flops_per_step,
                   2.0 * (2 * L + R) * heads * c.num_hidden_layers * positions / steps);
  EXPECT_DOUBLE_EQ(r.dense_bytes_per_step + r.routed_bytes_per_step, r.weight_bytes_per_step);
  // Routed bytes: FP8 experts are 1 byte per weight plus their 128x128 block scales.
  EXPECT_GE(r.routed_bytes_per_step, r.experts_touched_per_layer * moe_layers * expert);
  EXPECT_LE(r.routed_bytes_per_step, r.experts_touched_per_layer * moe_layers * expert * 1.1);
}

// --same-tokens (llama-batched-bench's workload): the batch's sequences are identical, so they
// touch the experts of one token per layer; distinct sequences touch more.
TEST(DecodeBenchTest, SameTokensRouteTheBatchAlike) {
  const std::string dir = testing::MakeTiny("decode_bench_same", "tiny", WeightDType::kFP8);
  auto loaded = LoadModel(dir, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const ModelConfig& c = (*loaded)->config;
  ThreadPool pool(2);
  auto same = RunDecodeBench(**loaded, pool, {.batches = {4}, .prompt_len = 3, .decode_steps = 2, .same_tokens = true});
  auto distinct = RunDecodeBench(**loaded, pool, {.batches = {4}, .prompt_len = 3, .decode_steps = 2});
  ASSERT_TRUE(same.ok() && distinct.ok());
  EXPECT_EQ((*same)[0].experts_touched_per_layer, c.num_experts_per_tok);
  EXPECT_GT((*distinct)[0].experts_touched_per_layer, c.num_experts_per_tok);
}

// --context (long contexts without a prefill): tiny-v32 with index_topk 16 at 40 cached
// positions. The indexer scores every position; MLA reads only the 16 chosen rows; its weights
// count as dense work.
TEST(DecodeBenchTest, CachedContextCountsTheIndexerAndTheChosenRows) {
  const std::string dir = testing::MakeTiny("decode_bench_ctx", "tiny-v32", WeightDType::kFP8);
  auto loaded = LoadModel(dir, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const ModelConfig& c = (*loaded)->config;
  ASSERT_EQ(c.sparse.index_topk, 16);
  ThreadPool pool(2);
  const int context = 40, steps = 2, batch = 2;
  auto rows = RunDecodeBench(**loaded, pool,
                             {.batches = {batch}, .context = context, .decode_steps = steps});
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  const DecodeBenchRow& r = (*rows)[0];
  const double layers = c.num_hidden_layers;
  // Step s (after the untimed one at position `context`) attends from position context + s + 1.
  double index_positions = 0;
  for (int s = 0; s < steps; ++s) index_positions += batch * (context + s + 2);
  const double per_position = (2.0 * c.kv_lora_rank + c.qk_rope_head_dim) * c.num_attention_heads;
  EXPECT_DOUBLE_EQ(r.attention_flops_per_step,
                   2.0 * layers *
                       (batch * steps * 16 * per_position +
                        index_positions * c.sparse.index_n_heads * c.sparse.index_head_dim) /
                       steps);
  EXPECT_DOUBLE_EQ(r.kv_bytes_per_step,
                   layers * (batch * steps * 16.0 * c.kv_a_dim() * 4 + index_positions * 132) /
                       steps);
  // The indexer's projections are in the dense bytes: more than the same model without them.
  const ModelWeights& w = *(*loaded)->weights;
  double indexer = 0;
  for (const auto& l : w.layers)
    indexer += l.attn.indexer.wq_b.Bytes() + l.attn.indexer.wk.Bytes() +
               l.attn.indexer.weights_proj.Bytes();
  EXPECT_GT(indexer, 0);
  EXPECT_GT(r.dense_bytes_per_step, indexer);
  // A context past the model's positions is refused by flag name.
  auto too_long = RunDecodeBench(**loaded, pool,
                                 {.batches = {1}, .context = c.max_position_embeddings});
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("--context"), std::string::npos);
}

TEST(DecodeBenchTest, FloorTakesTheSlowerRoofPerKindOfWork) {
  DecodeBenchRow r;
  r.dense_bytes_per_step = 1e9;       // 10 ms at 100 GB/s
  r.dense_flops_per_step = 4e9;       // 20 ms at 200 GFLOP/s: compute-bound
  r.routed_bytes_per_step = 3e9;      // 30 ms: bandwidth-bound
  r.routed_flops_per_step = 2e9;      // 10 ms
  r.kv_bytes_per_step = 0.5e9;        // 5 ms
  r.attention_flops_per_step = 0.2e9; // 1 ms
  EXPECT_DOUBLE_EQ(DecodeStepFloorMs(r, 100, 200), 20 + 30 + 5);
  // With a faster machine for compute, everything is bandwidth-bound.
  EXPECT_DOUBLE_EQ(DecodeStepFloorMs(r, 100, 1e6), 10 + 30 + 5);
}

}  // namespace
}  // namespace epserve
