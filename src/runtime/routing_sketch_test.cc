#include "runtime/routing_sketch.h"

#include <gtest/gtest.h>

#include <vector>

namespace epserve {
namespace {

// One forward pass of `tokens` tokens over layers 1 and 2 (top-2), expert ids from `base`, and
// an MTP layer (5) the sketch must ignore.
void Pass(RoutingSketch& s, int tokens, int base, uint32_t seq) {
  std::vector<int32_t> ids(tokens * 2);
  std::vector<float> w(tokens * 2, 0.5f);
  std::vector<uint32_t> seqs(tokens, seq);
  std::vector<int64_t> pos(tokens);
  for (int t = 0; t < tokens; ++t) pos[t] = t;
  for (int layer : {1, 2, 5}) {
    for (int t = 0; t < tokens; ++t) {
      ids[2 * t] = (base + t + layer) % 8;
      ids[2 * t + 1] = (base + t + layer + 1) % 8;
    }
    s.Observe({.layer = layer,
               .num_tokens = tokens,
               .top_k = 2,
               .expert_ids = ids.data(),
               .weights = w.data(),
               .sequence_ids = seqs.data(),
               .positions = pos.data()});
  }
}

placement::ModelShape Shape() {
  placement::ModelShape m;
  m.num_experts = 8;
  m.top_k = 2;
  m.hidden_size = 16;
  m.moe_intermediate_size = 8;
  return m;
}

TEST(RoutingSketch, KeepsTheMostRecentTokensInOrder) {
  RoutingSketch s({1, 2}, 2, 5);
  Pass(s, 3, 0, 7);
  Pass(s, 4, 3, 9);  // 7 tokens seen, the last 5 kept: seq 7 pos 2, seq 9 pos 0-3
  EXPECT_EQ(s.observed(), 7);
  EXPECT_EQ(s.size(), 5);
  placement::Trace trace(Shape(), {1, 2}, placement::GateWeights::kAbsent);
  ASSERT_TRUE(RoutingSketch::AppendTo(s.Serialize(), 100, &trace).ok());
  ASSERT_EQ(trace.num_tokens(), 5);
  EXPECT_EQ(trace.sequence_id(0), 107u);
  EXPECT_EQ(trace.position(0), 2u);
  EXPECT_EQ(trace.sequence_id(1), 109u);
  EXPECT_EQ(trace.position(4), 3u);
  // Token 0 is pass 1's token 2 (base 0): layer 1 experts 3, 4; layer 2 experts 4, 5.
  EXPECT_EQ(trace.Experts(0, 0)[0], 3);
  EXPECT_EQ(trace.Experts(0, 0)[1], 4);
  EXPECT_EQ(trace.Experts(1, 0)[0], 4);
  // Token 4 is pass 2's token 3 (base 3): layer 2 experts (3+3+2) % 8 = 0, 1.
  EXPECT_EQ(trace.Experts(1, 4)[0], 0);
  EXPECT_EQ(trace.Experts(1, 4)[1], 1);
}

TEST(RoutingSketch, AnEmptySketchAndAMalformedBlob) {
  RoutingSketch s({1, 2}, 2, 4);
  placement::Trace trace(Shape(), {1, 2}, placement::GateWeights::kAbsent);
  ASSERT_TRUE(RoutingSketch::AppendTo(s.Serialize(), 0, &trace).ok());
  EXPECT_EQ(trace.num_tokens(), 0);
  Pass(s, 2, 0, 1);
  std::string blob = s.Serialize();
  EXPECT_FALSE(RoutingSketch::AppendTo(blob.substr(0, blob.size() - 1), 0, &trace).ok());
  EXPECT_FALSE(RoutingSketch::AppendTo("abc", 0, &trace).ok());
}

TEST(RoutingSketch, APassThatDoesNotStartAtTheFirstLayerIsNotRecorded) {
  RoutingSketch s({1, 2}, 2, 4);
  std::vector<int32_t> ids = {0, 1};
  std::vector<float> w = {0.5f, 0.5f};
  std::vector<uint32_t> seq = {0};
  std::vector<int64_t> pos = {0};
  s.Observe({.layer = 2,
             .num_tokens = 1,
             .top_k = 2,
             .expert_ids = ids.data(),
             .weights = w.data(),
             .sequence_ids = seq.data(),
             .positions = pos.data()});
  EXPECT_EQ(s.observed(), 0);
}

}  // namespace
}  // namespace epserve
