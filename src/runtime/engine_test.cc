#include "runtime/engine.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <set>

#include "model/test_util.h"
#include "runtime/kv_block_pool.h"
#include "runtime/loaded_model.h"

namespace epserve {
namespace {

KvBlockPool SmallPool(int64_t blocks) {
  return KvBlockPool({.num_layers = 2, .row_width = 8, .block_size = 4, .num_blocks = blocks});
}

std::vector<int32_t> Range(int32_t from, int n) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = from + i;
  return v;
}

TEST(KvBlockPoolTest, AllocatesEveryBlockOnceThenRunsOut) {
  KvBlockPool pool = SmallPool(3);
  std::set<int32_t> got;
  for (int i = 0; i < 3; ++i) got.insert(pool.Allocate());
  EXPECT_EQ(got.size(), 3u);
  EXPECT_EQ(pool.Allocate(), -1);
  pool.Release(*got.begin());
  EXPECT_EQ(pool.num_available(), 1);
  EXPECT_EQ(pool.Allocate(), *got.begin());
}

TEST(KvBlockPoolTest, MatchesOnlyExactPrefixChains) {
  KvBlockPool pool = SmallPool(8);
  const std::vector<int32_t> tokens = Range(10, 12);  // three full blocks
  std::vector<int32_t> blocks;
  uint64_t key = 0;
  for (int b = 0; b < 3; ++b) {
    blocks.push_back(pool.Allocate());
    key = pool.Commit(blocks.back(), key, std::span<const int32_t>(tokens).subspan(b * 4, 4));
  }
  for (int32_t b : blocks) pool.Release(b);
  EXPECT_EQ(pool.num_cached(), 3);
  // The same first 9 tokens: two full blocks match (at most max_blocks).
  std::vector<uint64_t> keys;
  auto hit = pool.MatchPrefix(std::span<const int32_t>(tokens).first(9), 8, &keys);
  EXPECT_EQ(hit, (std::vector<int32_t>{blocks[0], blocks[1]}));
  for (int32_t b : hit) pool.Release(b);
  EXPECT_EQ(pool.MatchPrefix(tokens, 1, nullptr).size(), 1u);
  pool.Release(blocks[0]);
  // A different first block: the second block's tokens alone do not match (the chain differs).
  std::vector<int32_t> other = tokens;
  other[0] = 99;
  EXPECT_TRUE(pool.MatchPrefix(other, 8, nullptr).empty());
}

TEST(KvBlockPoolTest, EvictsLeastRecentlyReleasedCachedBlocksFirst) {
  KvBlockPool pool = SmallPool(2);
  const int32_t a = pool.Allocate(), b = pool.Allocate();
  pool.Commit(a, 0, Range(0, 4));
  pool.Commit(b, 0, Range(100, 4));
  pool.Release(b);  // b released first: evicted first
  pool.Release(a);
  EXPECT_EQ(pool.num_available(), 2);
  EXPECT_EQ(pool.Allocate(), b);
  EXPECT_EQ(pool.MatchPrefix(Range(100, 4), 1, nullptr).size(), 0u);  // b's prefix is gone
  EXPECT_EQ(pool.MatchPrefix(Range(0, 4), 1, nullptr), std::vector<int32_t>{a});
}

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // CTest runs each test of this suite as its own process, possibly at once: one model folder
    // per process, or one would rewrite the files another has mapped.
    dir_ = testing::MakeTiny("engine_" + std::to_string(::getpid()));
    loaded_ = LoadModel(dir_, {}).value().release();
    pool_ = new ThreadPool(2);
    model_ = new Model(loaded_->config, *loaded_->weights, *pool_);
  }
  static void TearDownTestSuite() {
    delete model_;
    delete pool_;
    delete loaded_;
    std::filesystem::remove_all(dir_);
  }
  // Steps until the engine has no work; fails after `limit` steps (no hang).
  static std::vector<TokenEvent> Drain(Engine& e, int limit = 500) {
    std::vector<TokenEvent> all;
    for (int i = 0; i < limit && e.HasWork(); ++i) {
      auto ev = e.Step();
      EXPECT_TRUE(ev.ok()) << ev.status().message();
      for (auto& x : *ev) all.push_back(std::move(x));
    }
    EXPECT_FALSE(e.HasWork()) << "engine still busy after " << limit << " steps";
    return all;
  }
  static std::string dir_;
  static LoadedModel* loaded_;
  static ThreadPool* pool_;
  static Model* model_;
};
std::string EngineTest::dir_;
LoadedModel* EngineTest::loaded_ = nullptr;
ThreadPool* EngineTest::pool_ = nullptr;
Model* EngineTest::model_ = nullptr;

TEST_F(EngineTest, RejectsBadRequestsAtSubmission) {
  Engine e(*model_, {.block_size = 16, .num_blocks = 4});
  EXPECT_EQ(e.Submit({}).status().message(), "the prompt is empty");
  EXPECT_NE(
      e.Submit({.prompt = {1, 5000}}).status().message().find("outside the vocabulary [0, 1024)"),
      std::string::npos);
  EXPECT_NE(e.Submit({.prompt = Range(2, 60), .max_tokens = 10})
                .status()
                .message()
                .find("whole KV pool holds 4 blocks"),
            std::string::npos);
  EXPECT_FALSE(e.HasWork());
}

TEST_F(EngineTest, ChunkedPrefillYieldsLogitsOnlyAtThePromptEnd) {
  Engine e(*model_, {.max_batch_tokens = 8, .block_size = 16, .num_blocks = 8});
  ASSERT_TRUE(e.Submit({.prompt = Range(2, 20), .max_tokens = 2, .use_default_stop = false}).ok());
  StepPlan p1 = e.Schedule();
  ASSERT_EQ(p1.chunks.size(), 1u);
  EXPECT_EQ(p1.chunks[0].tokens.size(), 8u);
  EXPECT_FALSE(p1.chunks[0].want_logits);
  std::vector<float> logits;
  ASSERT_TRUE(ExecutePlan(*model_, p1, e.pool().blocks(), &logits).ok());
  EXPECT_TRUE(e.Complete(p1, logits).empty());
  auto rest = Drain(e);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest.back().finish, FinishReason::kLength);
}

TEST_F(EngineTest, StopsAtAStopTokenAndCancelsWaitingAndRunning) {
  // Greedy output of a prompt, then the same prompt with its second token as a stop id.
  Engine e(*model_, {.block_size = 16, .num_blocks = 16});
  ASSERT_TRUE(e.Submit({.prompt = Range(30, 5), .max_tokens = 6, .use_default_stop = false}).ok());
  std::vector<int32_t> out;
  for (auto& ev : Drain(e)) out.push_back(ev.token);
  ASSERT_EQ(out.size(), 6u);
  ASSERT_TRUE(e.Submit({.prompt = Range(30, 5), .max_tokens = 6, .stop_ids = {out[1]}}).ok());
  auto ev = Drain(e);
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev.back().finish, FinishReason::kStop);
  EXPECT_EQ(ev.back().token, out[1]);
  // Cancel one request before it runs and one while it runs.
  auto c = e.Submit({.prompt = Range(40, 3), .max_tokens = 20}).value();
  auto d = e.Submit({.prompt = Range(50, 3), .max_tokens = 20}).value();
  ASSERT_TRUE(e.Step().ok());
  e.Cancel(c);
  auto all = Drain(e);
  int cancelled = 0;
  for (auto& x : all) cancelled += x.request == c && x.finish == FinishReason::kCancelled;
  EXPECT_EQ(cancelled, 1);
  EXPECT_EQ(all.back().request, d);
}

TEST_F(EngineTest, LogitAdjustmentsReachTheDraw) {
  Engine e(*model_, {.block_size = 16, .num_blocks = 16});
  // Greedy output first.
  ASSERT_TRUE(e.Submit({.prompt = Range(30, 5), .max_tokens = 4, .use_default_stop = false}).ok());
  std::vector<int32_t> plain;
  for (auto& ev : Drain(e)) plain.push_back(ev.token);
  ASSERT_EQ(plain.size(), 4u);
  // A +100 bias on a token the model did not pick makes every greedy token that one.
  const int32_t forced = plain[0] == 7 ? 8 : 7;
  ASSERT_TRUE(e.Submit({.prompt = Range(30, 5),
                        .adjust = {.logit_bias = {{forced, 100.0f}}},
                        .max_tokens = 4,
                        .use_default_stop = false})
                  .ok());
  for (auto& ev : Drain(e)) EXPECT_EQ(ev.token, forced);
  // min_tokens holds the stop id back: with the first greedy token as the stop id the request
  // ends at once without it, and goes on to min_tokens with it.
  ASSERT_TRUE(e.Submit({.prompt = Range(30, 5), .max_tokens = 4, .stop_ids = {plain[0]}}).ok());
  EXPECT_EQ(Drain(e).size(), 1u);
  ASSERT_TRUE(e.Submit({.prompt = Range(30, 5),
                        .adjust = {.min_tokens = 3},
                        .max_tokens = 4,
                        .stop_ids = {plain[0]}})
                  .ok());
  auto held = Drain(e);
  ASSERT_GE(held.size(), 3u);
  for (size_t i = 0; i + 1 < held.size(); ++i) EXPECT_NE(held[i].token, plain[0]);
  // Refused at submission: a bias outside the vocabulary, min_tokens above max_tokens, a
  // constraint without a factory.
  EXPECT_NE(e.Submit({.prompt = {1}, .adjust = {.logit_bias = {{5000, 1.0f}}}})
                .status()
                .message()
                .find("logit_bias: token 5000 is outside the vocabulary"),
            std::string::npos);
  EXPECT_NE(e.Submit({.prompt = {1}, .adjust = {.min_tokens = 9}, .max_tokens = 2})
                .status()
                .message()
                .find("min_tokens"),
            std::string::npos);
  EXPECT_NE(e.Submit({.prompt = {1}, .constraint = "x"}).status().message().find("constraint"),
            std::string::npos);
}

// A constraint that allows exactly the tokens of its spec ("5,9,11"), in order, then a stop id.
class ScriptConstraint : public TokenConstraint {
 public:
  ScriptConstraint(std::vector<int32_t> script, int32_t stop) : script_(script), stop_(stop) {}
  void Restrict(float* l, int vocab, int) override {
    const int32_t next = pos_ < script_.size() ? script_[pos_] : stop_;
    for (int v = 0; v < vocab; ++v)
      if (v != next) l[v] = -INFINITY;
  }
  Status Accept(int32_t) override {
    ++pos_;
    return Status::Ok();
  }

 private:
  std::vector<int32_t> script_;
  int32_t stop_;
  size_t pos_ = 0;
};

TEST_F(EngineTest, AConstraintDecidesEveryTokenEvenWhenSampling) {
  EngineOptions o{.block_size = 16, .num_blocks = 16};
  o.constraints =
      [](const std::string& spec,
         const std::vector<int32_t>& stops) -> StatusOr<std::unique_ptr<TokenConstraint>> {
    if (spec != "script") return Status::InvalidArgument("unknown spec " + spec);
    return std::unique_ptr<TokenConstraint>(new ScriptConstraint({5, 9, 11}, stops.at(0)));
  };
  Engine e(*model_, o);
  EXPECT_EQ(e.Submit({.prompt = {1}, .constraint = "nope"}).status().message(),
            "unknown spec nope");
  ASSERT_TRUE(e.Submit({.prompt = Range(30, 5),
                        .sampling = {.temperature = 1.0f, .seed = 3},
                        .constraint = "script",
                        .max_tokens = 10,
                        .stop_ids = {2}})
                  .ok());
  std::vector<int32_t> out;
  auto ev = Drain(e);
  for (auto& x : ev) out.push_back(x.token);
  EXPECT_EQ(out, (std::vector<int32_t>{5, 9, 11, 2}));
  EXPECT_EQ(ev.back().finish, FinishReason::kStop);
}

// A request resumed after k of its tokens (prompt + those tokens, resumed_tokens k: what serve
// does when a group fails mid-stream) produces exactly the tokens the uninterrupted request
// produced after them: greedy, seeded sampling, with penalties (which count the resumed tokens
// as output), and under a constraint (which is fed them first).
TEST_F(EngineTest, AResumedRequestGoesOnAsIfUninterrupted) {
  EngineOptions o{.block_size = 16, .num_blocks = 32};
  o.constraints =
      [](const std::string&,
         const std::vector<int32_t>& stops) -> StatusOr<std::unique_ptr<TokenConstraint>> {
    return std::unique_ptr<TokenConstraint>(
        new ScriptConstraint({5, 9, 11, 5, 5, 9, 40, 41, 42, 43}, stops.at(0)));
  };
  Engine e(*model_, o);
  struct Case {
    const char* name;
    EngineRequest request;
  };
  const std::vector<int32_t> prompt = Range(30, 7);
  std::vector<Case> cases = {
      {"greedy", {.prompt = prompt, .max_tokens = 12, .use_default_stop = false}},
      {"sampled",
       {.prompt = prompt,
        .sampling = {.temperature = 1.0f, .top_p = 0.9f, .seed = 5},
        .max_tokens = 12,
        .use_default_stop = false}},
      {"penalties",
       {.prompt = prompt,
        .sampling = {.temperature = 0.7f, .seed = 9},
        .adjust = {.presence_penalty = 1.5f, .frequency_penalty = 2.0f, .min_tokens = 10},
        .max_tokens = 12,
        .stop_ids = {3}}},
      {"constraint",
       {.prompt = prompt,
        .sampling = {.temperature = 1.0f, .seed = 2},
        .constraint = "script",
        .max_tokens = 12,
        .stop_ids = {2}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(e.Submit(c.request).ok());
    std::vector<int32_t> whole;
    for (auto& ev : Drain(e)) whole.push_back(ev.token);
    ASSERT_GE(whole.size(), 4u);
    for (int k : {1, 3, static_cast<int>(whole.size()) - 1}) {
      SCOPED_TRACE(k);
      EngineRequest r = c.request;
      r.prompt.insert(r.prompt.end(), whole.begin(), whole.begin() + k);
      r.resumed_tokens = k;
      r.max_tokens -= k;
      r.adjust.min_tokens = std::max(0, r.adjust.min_tokens - k);
      ASSERT_TRUE(e.Submit(r).ok());
      std::vector<int32_t> rest;
      for (auto& ev : Drain(e)) rest.push_back(ev.token);
      EXPECT_EQ(rest, std::vector<int32_t>(whole.begin() + k, whole.end()));
    }
  }
  // The penalties change the draw (else that case would prove nothing about them).
  {
    EngineRequest plain = cases[2].request, penalised = cases[2].request;
    plain.adjust = {};
    std::vector<int32_t> a, b;
    ASSERT_TRUE(e.Submit(plain).ok());
    for (auto& ev : Drain(e)) a.push_back(ev.token);
    ASSERT_TRUE(e.Submit(penalised).ok());
    for (auto& ev : Drain(e)) b.push_back(ev.token);
    EXPECT_NE(a, b);
  }
  EXPECT_NE(e.Submit({.prompt = {1, 2}, .resumed_tokens = 2})
                .status()
                .message()
                .find("resumed_tokens must be in [0, prompt length)"),
            std::string::npos);
}

TEST_F(EngineTest, LogprobsAreNormalisedAndTopNIsSorted) {
  Engine e(*model_, {.block_size = 16, .num_blocks = 4, .keep_logits = true});
  ASSERT_TRUE(e.Submit({.prompt = Range(3, 4), .max_tokens = 1, .logprobs = 5}).ok());
  auto ev = Drain(e);
  ASSERT_EQ(ev.size(), 1u);
  ASSERT_EQ(ev[0].top_logprobs.size(), 5u);
  EXPECT_EQ(ev[0].top_logprobs[0].first, ev[0].token);  // greedy: the most likely token
  EXPECT_FLOAT_EQ(ev[0].top_logprobs[0].second, ev[0].logprob);
  for (int i = 1; i < 5; ++i)
    EXPECT_LE(ev[0].top_logprobs[i].second, ev[0].top_logprobs[i - 1].second);
  double mass = 0;
  float mx = *std::max_element(ev[0].logits.begin(), ev[0].logits.end());
  for (float l : ev[0].logits) mass += std::exp(l - mx);
  EXPECT_NEAR(ev[0].logprob, -std::log(mass), 1e-4);
}

TEST_F(EngineTest, PreemptsUnderMemoryPressureAndLosesNothing) {
  // Six requests of up to 40 positions, a pool of 6 blocks of 16 (96 positions).
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < 6; ++i) {
    Engine solo(*model_, {.block_size = 16, .num_blocks = 6});
    ASSERT_TRUE(solo.Submit({.prompt = Range(100 + 20 * i, 10 + 3 * i),
                             .max_tokens = 20,
                             .use_default_stop = false})
                    .ok());
    alone.emplace_back();
    for (auto& ev : Drain(solo)) alone.back().push_back(ev.token);
  }
  Engine e(*model_, {.block_size = 16, .num_blocks = 6});
  std::map<RequestId, int> which;
  for (int i = 0; i < 6; ++i)
    which[e.Submit({.prompt = Range(100 + 20 * i, 10 + 3 * i),
                    .max_tokens = 20,
                    .use_default_stop = false})
              .value()] = i;
  std::vector<std::vector<int32_t>> got(6);
  int finished = 0;
  for (auto& ev : Drain(e)) {
    got[which[ev.request]].push_back(ev.token);
    finished += ev.finish == FinishReason::kLength;
  }
  EXPECT_EQ(finished, 6);
  EXPECT_EQ(got, alone);
  EXPECT_GT(e.stats().preemptions, 0);
  EXPECT_LE(e.stats().peak_blocks_referenced, 6);
}

TEST(EngineNonFiniteTest, FailsOnlyTheRequestWhoseActivationsWentNonFinite) {
  // Token 7's embedding row holds a NaN: a request with it in its prompt fails at the step that
  // computes it (a prefill chunk without logits here), naming where; the other request of the
  // same steps runs to its end.
  const std::string dir = testing::MakeTiny("engine_nan_" + std::to_string(::getpid()));
  testing::RewriteCheckpoint(dir, [](testing::EditableTensor& t) {
    if (t.name == "model.embed_tokens.weight") {
      t.bytes[2 * (7 * 256 + 5)] = 0xc0;
      t.bytes[2 * (7 * 256 + 5) + 1] = 0x7f;
    }
    return true;
  });
  auto loaded = LoadModel(dir, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  ThreadPool pool(2);
  Model model((*loaded)->config, *(*loaded)->weights, pool);
  Engine e(model, {.max_batch_tokens = 8, .block_size = 4, .num_blocks = 16});
  const RequestId bad =
      e.Submit({.prompt = {3, 4, 5, 7, 8, 9, 10, 11, 12, 13}, .max_tokens = 4}).value();
  const RequestId good =
      e.Submit({.prompt = {3, 4, 5, 6}, .max_tokens = 4, .use_default_stop = false}).value();
  std::map<RequestId, TokenEvent> last;
  int good_tokens = 0;
  for (int i = 0; i < 50 && e.HasWork(); ++i) {
    auto ev = e.Step();
    ASSERT_TRUE(ev.ok()) << ev.status().message();
    for (auto& x : *ev) {
      if (x.request == good && x.token >= 0) ++good_tokens;
      if (x.finish != FinishReason::kNone) last[x.request] = x;
    }
  }
  ASSERT_EQ(last.size(), 2u);
  EXPECT_EQ(last[bad].finish, FinishReason::kError);
  EXPECT_EQ(last[bad].error, "embedding: non-finite activation (NaN) at token position 3");
  EXPECT_EQ(last[good].finish, FinishReason::kLength);
  EXPECT_EQ(good_tokens, 4);
  // Its blocks were not kept for prefix reuse: the same prompt fails the same way again.
  const RequestId again =
      e.Submit({.prompt = {3, 4, 5, 7, 8, 9, 10, 11, 12, 13}, .max_tokens = 4}).value();
  TokenEvent end;
  for (int i = 0; i < 50 && e.HasWork(); ++i) {
    auto ev = e.Step();
    ASSERT_TRUE(ev.ok()) << ev.status().message();
    for (auto& x : *ev)
      if (x.request == again && x.finish != FinishReason::kNone) end = x;
  }
  EXPECT_EQ(end.error, "embedding: non-finite activation (NaN) at token position 3");
  std::filesystem::remove_all(dir);
}

TEST(StepPlanTest, SerializesRoundTripAndRejectsTruncation) {
  StepPlan p;
  p.chunks.push_back({.request = 7,
                      .sequence_id = 3,
                      .start = 64,
                      .tokens = {1, 2, 3},
                      .blocks = {4, 9},
                      .want_logits = true});
  p.chunks.push_back({.request = 8, .start = 0, .tokens = {5}, .blocks = {1}});
  const std::string bytes = p.Serialize();
  auto q = StepPlan::Deserialize(bytes);
  ASSERT_TRUE(q.ok());
  ASSERT_EQ(q->chunks.size(), 2u);
  EXPECT_EQ(q->chunks[0].blocks, (std::vector<int32_t>{4, 9}));
  EXPECT_TRUE(q->chunks[0].want_logits);
  EXPECT_EQ(q->chunks[1].tokens, std::vector<int32_t>{5});
  EXPECT_FALSE(StepPlan::Deserialize(bytes.substr(0, bytes.size() - 3)).ok());
}

}  // namespace
}  // namespace epserve
