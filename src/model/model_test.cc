#include "model/model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "io/checkpoint.h"
#include "model/test_util.h"

namespace epserve {
namespace {

using testing::Load;
using testing::Loaded;
using testing::Prompt;

// Logits for three sequences: prefill of lengths 1, 7, 33 in one batch.
std::vector<float> PrefillLogits(const Loaded& m, int threads) {
  ThreadPool pool(threads);
  Model model(m.config, *m.w, pool);
  LatentKvCache cache(m.config.num_hidden_layers, m.config.kv_a_dim(), 3, 64);
  ForwardBatch b{{{0, Prompt(1, 3)}, {1, Prompt(7, 5)}, {2, Prompt(33, 11)}}};
  std::vector<float> logits(3 * m.config.vocab_size);
  Status st = model.Forward(b, cache, logits.data());
  CHECK(st.ok()) << st.message();
  return logits;
}

TEST(ModelTest, IdenticalForOneAndTwoThreads) {
  Loaded m = Load(testing::MakeTiny("threads", "tiny", WeightDType::kFP8));
  EXPECT_EQ(PrefillLogits(m, 1), PrefillLogits(m, 2));
}

// Int8 weights (--requant int8): each row is independent of the other rows of the batch and
// of the thread count, as on the exact path. (Their error is the reference tests' subject.)
TEST(ModelTest, Int8IsBatchAndThreadCountInvariant) {
  const std::string dir = testing::MakeTiny("int8", "tiny", WeightDType::kFP8);
  Loaded exact = Load(dir), m = Load(dir, LoadOptions::Requant::kInt8);
  const std::vector<float> one = PrefillLogits(m, 1);
  EXPECT_EQ(one, PrefillLogits(m, 2));
  EXPECT_EQ(one, PrefillLogits(m, 3));
  EXPECT_NE(one, PrefillLogits(exact, 2));  // int8 really ran
  // The 7-token sequence alone.
  ThreadPool pool(2);
  Model model(m.config, *m.w, pool);
  LatentKvCache cache(m.config.num_hidden_layers, m.config.kv_a_dim(), 3, 64);
  std::vector<float> alone(m.config.vocab_size);
  ASSERT_TRUE(model.Forward({{{1, Prompt(7, 5)}}}, cache, alone.data()).ok());
  EXPECT_TRUE(std::equal(alone.begin(), alone.end(), one.begin() + m.config.vocab_size));
}

TEST(ModelTest, IncrementalDecodeMatchesOneShotPrefill) {
  for (const char* preset : {"tiny", "tiny-v2"}) {
    Loaded m = Load(testing::MakeTiny("incremental", preset));
    ThreadPool pool(2);
    Model model(m.config, *m.w, pool);
    const int V = m.config.vocab_size;
    std::vector<int32_t> p = Prompt(20, 9);
    // One shot.
    LatentKvCache c1(m.config.num_hidden_layers, m.config.kv_a_dim(), 1, 32);
    std::vector<float> one(V), inc(V);
    ASSERT_TRUE(model.Forward({{{0, p}}}, c1, one.data()).ok());
    // 12 tokens of prefill, then a chunk of 5, then 3 single tokens.
    LatentKvCache c2(m.config.num_hidden_layers, m.config.kv_a_dim(), 1, 32);
    ASSERT_TRUE(model.Forward({{{0, {p.begin(), p.begin() + 12}}}}, c2, inc.data()).ok());
    ASSERT_TRUE(model.Forward({{{0, {p.begin() + 12, p.begin() + 17}}}}, c2, inc.data()).ok());
    for (int i = 17; i < 20; ++i) ASSERT_TRUE(model.Forward({{{0, {p[i]}}}}, c2, inc.data()).ok());
    EXPECT_EQ(c2.length(0), 20);
    float max_abs = 0, max_diff = 0;
    for (int i = 0; i < V; ++i) {
      max_abs = std::max(max_abs, std::fabs(one[i]));
      max_diff = std::max(max_diff, std::fabs(one[i] - inc[i]));
    }
    EXPECT_LT(max_diff / max_abs, 1e-5) << preset;
    EXPECT_GT(max_abs, 0.1f);  // logits are not degenerate
  }
}

TEST(ModelTest, RejectsBadTokensAndCacheOverflow) {
  Loaded m = Load(testing::MakeTiny("bad"));
  ThreadPool pool(1);
  Model model(m.config, *m.w, pool);
  LatentKvCache cache(m.config.num_hidden_layers, m.config.kv_a_dim(), 1, 4);
  std::vector<float> logits(m.config.vocab_size);
  Status st = model.Forward({{{0, {5, 1024}}}}, cache, logits.data());
  EXPECT_EQ(st.message(), "token id 1024 out of range [0, 1024)");
  st = model.Forward({{{0, {1, 2, 3, 4, 5}}}}, cache, logits.data());
  EXPECT_NE(st.message().find("needs 5 positions; the cache holds 4"), std::string::npos);
}

// Writes a BF16 NaN (or +Inf) over element `index` of tensor `name`.
void Poison(const std::string& dir, const std::string& name, int64_t index, bool nan = true) {
  testing::RewriteCheckpoint(dir, [&](testing::EditableTensor& t) {
    if (t.name == name) {
      CHECK(t.dtype == DType::kBF16);
      t.bytes[2 * index] = nan ? 0xc0 : 0x80;
      t.bytes[2 * index + 1] = 0x7f;
    }
    return true;
  });
}

TEST(ModelTest, NamesTheFirstLayerWhoseOutputWentNonFinite) {
  struct Case {
    const char* tensor;
    bool nan;
    const char* want;
  };
  for (const Case& k :
       {Case{"model.layers.2.mlp.shared_experts.down_proj.weight", true,
             "layer 2 (moe): non-finite activation (NaN) at token position 0"},
        Case{"model.layers.0.mlp.down_proj.weight", true,
             "layer 0 (mlp): non-finite activation (NaN) at token position 0"},
        Case{"model.layers.1.self_attn.o_proj.weight", true,
             "layer 1 (attention): non-finite activation (NaN) at token position 0"}}) {
    const std::string dir = testing::MakeTiny("nan");
    Poison(dir, k.tensor, 0, k.nan);
    Loaded m = Load(dir);
    ThreadPool pool(2);
    Model model(m.config, *m.w, pool);
    LatentKvCache cache(m.config.num_hidden_layers, m.config.kv_a_dim(), 2, 16);
    std::vector<float> logits(2 * m.config.vocab_size);
    ASSERT_TRUE(model.Forward({{{0, Prompt(5, 3)}, {1, Prompt(2, 8)}}}, cache, logits.data()).ok());
    ASSERT_EQ(model.non_finite().size(), 2u) << k.tensor;
    EXPECT_EQ(model.non_finite()[0].chunk, 0u);
    EXPECT_EQ(model.non_finite()[0].Message(), k.want);
    EXPECT_EQ(model.non_finite()[1].chunk, 1u);
  }
}

TEST(ModelTest, NonFiniteEmbeddingRowFailsOnlyItsChunk) {
  const std::string dir = testing::MakeTiny("nan_embed");
  Poison(dir, "model.embed_tokens.weight", 7 * 256 + 3, /*nan=*/false);  // row of token 7: +Inf
  Loaded m = Load(dir);
  ThreadPool pool(1);
  Model model(m.config, *m.w, pool);
  LatentKvCache cache(m.config.num_hidden_layers, m.config.kv_a_dim(), 2, 16);
  const int V = m.config.vocab_size;
  std::vector<float> logits(2 * V);
  ASSERT_TRUE(model.Forward({{{0, {1, 2, 3}}, {1, {4, 5, 7, 9}}}}, cache, logits.data()).ok());
  ASSERT_EQ(model.non_finite().size(), 1u);
  EXPECT_EQ(model.non_finite()[0].chunk, 1u);
  EXPECT_EQ(model.non_finite()[0].Message(),
            "embedding: non-finite activation (Inf) at token position 2");
  for (int v = 0; v < V; ++v) ASSERT_TRUE(std::isfinite(logits[v]));  // the other chunk is intact
  ASSERT_TRUE(model.Forward({{{0, {4}}}}, cache, logits.data()).ok());
  EXPECT_TRUE(model.non_finite().empty());
}

// Every overlap mode gives the same bits: prefill chunks, a sequence cut between the two
// micro-batches, decode steps of 1..3 tokens (a step of one token leaves half B empty), the route
// observer's events (whole batch, layer order) and the non-finite report.
struct OverlapRun {
  std::vector<std::vector<float>> logits;
  std::vector<std::string> routes;  // one line per observed MoE layer
  std::vector<bool> split;
};

OverlapRun RunWithOverlap(const Loaded& m, const OverlapOptions& overlap) {
  ThreadPool pool(2);
  Model model(m.config, *m.w, pool);
  model.SetOverlap(overlap);
  OverlapRun run;
  model.SetRouteObserver([&](const RouteEvent& ev) {
    std::string line = std::to_string(ev.layer) + ":";
    for (int64_t i = 0; i < ev.num_tokens * ev.top_k; ++i)
      line += " " + std::to_string(ev.expert_ids[i]) + "/" + std::to_string(ev.weights[i]);
    for (int64_t t = 0; t < ev.num_tokens; ++t)
      line += " @" + std::to_string(ev.sequence_ids[t]) + "." + std::to_string(ev.positions[t]);
    run.routes.push_back(line);
  });
  LatentKvCache cache(m.config.num_hidden_layers, m.config.kv_a_dim(), 3, 64);
  const int V = m.config.vocab_size;
  auto step = [&](const ForwardBatch& b) {
    std::vector<float> logits(b.chunks.size() * V);
    Status st = model.Forward(b, cache, logits.data());
    CHECK(st.ok()) << st.message();
    run.logits.push_back(std::move(logits));
    run.split.push_back(model.last_split());
  };
  step({{{0, Prompt(1, 3)}, {1, Prompt(7, 5)}, {2, Prompt(33, 11)}}});  // halves cut sequence 2
  step({{{0, {17}}, {1, {18}}, {2, {19}}}});
  step({{{1, {20}}, {2, {21}}}});
  step({{{2, {22}}}});
  return run;
}

TEST(ModelTest, OverlapModesGiveIdenticalBits) {
  for (const char* preset : {"tiny", "tiny-v2"}) {
    Loaded m = Load(testing::MakeTiny("overlap", preset, WeightDType::kFP8));
    const OverlapRun want = RunWithOverlap(m, {.mode = Overlap::kDispatch});
    EXPECT_EQ(want.split, std::vector<bool>(4, false));
    for (const OverlapOptions& o :
         {OverlapOptions{.mode = Overlap::kNone}, OverlapOptions{.mode = Overlap::kMicroBatch},
          OverlapOptions{.mode = Overlap::kMicroBatch, .min_tokens = 3}}) {
      const OverlapRun got = RunWithOverlap(m, o);
      EXPECT_EQ(got.logits, want.logits) << preset << " " << OverlapName(o.mode);
      EXPECT_EQ(got.routes, want.routes) << preset << " " << OverlapName(o.mode);
      if (o.mode == Overlap::kMicroBatch) {
        // min_tokens 3: only the steps of at least 3 tokens split.
        const std::vector<bool> split = o.min_tokens == 3
                                            ? std::vector<bool>{true, true, false, false}
                                            : std::vector<bool>(4, true);
        EXPECT_EQ(got.split, split) << preset;
      }
    }
  }
}

TEST(ModelTest, MicroBatchesReportNonFiniteChunksLikeTheWholeBatch) {
  const std::string dir = testing::MakeTiny("nan_overlap");
  Poison(dir, "model.layers.2.mlp.shared_experts.down_proj.weight", 0);
  Loaded m = Load(dir);
  ThreadPool pool(2);
  Model model(m.config, *m.w, pool);
  model.SetOverlap({.mode = Overlap::kMicroBatch});
  LatentKvCache cache(m.config.num_hidden_layers, m.config.kv_a_dim(), 3, 16);
  std::vector<float> logits(3 * m.config.vocab_size);
  ASSERT_TRUE(model
                  .Forward({{{0, Prompt(5, 3)}, {1, Prompt(2, 8)}, {2, Prompt(4, 1)}}}, cache,
                           logits.data())
                  .ok());
  ASSERT_TRUE(model.last_split());
  ASSERT_EQ(model.non_finite().size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(model.non_finite()[i].chunk, i);
    EXPECT_EQ(model.non_finite()[i].layer, 2);
  }
}

}  // namespace
}  // namespace epserve
