#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace epserve {
namespace {

TEST(SamplerTest, GreedyIsArgMax) {
  std::vector<float> l = {0.1f, 3.0f, -1.0f, 3.0f};
  Sampler s({});
  EXPECT_EQ(s.Sample(l.data(), 4), 1);  // tie goes to the lower id
}

TEST(SamplerTest, TopPKeepsOnlyTheNucleus) {
  // Probabilities ~ {0.665, 0.245, 0.09}: top_p 0.5 keeps only token 0.
  std::vector<float> l = {2.0f, 1.0f, 0.0f};
  Sampler s({.temperature = 1.0f, .top_p = 0.5f, .seed = 7});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(s.Sample(l.data(), 3), 0);
}

TEST(SamplerTest, TopKKeepsOnlyTheKMostLikely) {
  // Probabilities ~ {0.4, 0.3, 0.2, 0.1}: top_k 2 draws only tokens 0 and 1, in ratio ~4:3.
  std::vector<float> l = {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
  Sampler s({.temperature = 1.0f, .top_p = 1.0f, .top_k = 2, .seed = 3});
  int counts[4] = {0, 0, 0, 0};
  for (int i = 0; i < 7000; ++i) ++counts[s.Sample(l.data(), 4)];
  EXPECT_EQ(counts[2] + counts[3], 0);
  EXPECT_NEAR(counts[0] / 7000.0, 4.0 / 7.0, 0.03);
}

TEST(SamplerTest, SeededSamplingIsReproducibleAndFollowsProbabilities) {
  std::vector<float> l = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  Sampler a({.temperature = 1.0f, .top_p = 1.0f, .seed = 42}), b({.temperature = 1.0f, .top_p = 1.0f, .seed = 42});
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < 20000; ++i) {
    int x = a.Sample(l.data(), 3);
    EXPECT_EQ(x, b.Sample(l.data(), 3));
    counts[x]++;
  }
  EXPECT_NEAR(counts[0] / 20000.0, 0.6, 0.02);
  EXPECT_NEAR(counts[1] / 20000.0, 0.3, 0.02);
  EXPECT_NEAR(counts[2] / 20000.0, 0.1, 0.02);
}

// Speculative verification keeps the target distribution whatever the draft distribution:
// draft d ~ q, then VerifyDraft's token must be distributed as p (Leviathan et al. 2023,
// Theorem 1), and drafts are kept at the rate sum_v min(p_v, q_v).
TEST(SamplerTest, VerifyDraftKeepsTheTargetDistribution) {
  const std::vector<float> l = {1.0f, 0.2f, -0.5f, 0.8f, -1.5f, 0.0f};
  const int V = 6;
  for (int top_k : {0, 3}) {
    SCOPED_TRACE(top_k);
    Sampler target({.temperature = 1.0f, .top_k = top_k, .seed = 11});
    Sampler drafter({.temperature = 1.0f, .seed = 12});
    std::vector<float> p;
    target.Distribution(l.data(), V, &p);
    // A draft distribution unlike p (it favours the tokens p finds unlikely).
    const std::vector<float> q = {0.05f, 0.1f, 0.3f, 0.05f, 0.3f, 0.2f};
    double overlap = 0;
    for (int v = 0; v < V; ++v) overlap += std::min(p[v], q[v]);
    const int n = 200000;
    std::vector<int> counts(V, 0);
    int kept = 0;
    for (int i = 0; i < n; ++i) {
      const int32_t d = drafter.SampleFrom(q.data(), V);
      bool accepted = false;
      const int32_t t = target.VerifyDraft(l.data(), V, d, q, &accepted);
      ++counts[t];
      kept += accepted ? 1 : 0;
      if (accepted) {
        EXPECT_EQ(t, d);
      }
    }
    // Binomial sd <= sqrt(0.25 / 200000) ~ 0.0011: 0.006 is over 5 sd.
    for (int v = 0; v < V; ++v) {
      EXPECT_NEAR(static_cast<double>(counts[v]) / n, p[v], 0.006) << v;
    }
    if (top_k == 3) {
      for (int v : {2, 4, 5}) {
        EXPECT_EQ(counts[v], 0) << v;  // outside the top 3
      }
    }
    EXPECT_NEAR(static_cast<double>(kept) / n, overlap, 0.006);
  }
}

TEST(SamplerTest, GreedyVerifyKeepsTheDraftOnlyWhenItIsTheArgMax) {
  const std::vector<float> l = {0.1f, 3.0f, -1.0f};
  Sampler s({});
  bool accepted = true;
  EXPECT_EQ(s.VerifyDraft(l.data(), 3, 2, {}, &accepted), 1);
  EXPECT_FALSE(accepted);
  EXPECT_EQ(s.VerifyDraft(l.data(), 3, 1, {}, &accepted), 1);
  EXPECT_TRUE(accepted);
}

TEST(SamplerTest, DistributionIsWhatSampleDrawsFrom) {
  const std::vector<float> l = {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
  Sampler s({.temperature = 1.0f, .top_p = 0.65f, .seed = 5});
  std::vector<float> p;
  s.Distribution(l.data(), 4, &p);
  // top_p 0.65 keeps {0.4, 0.3}, renormalized.
  EXPECT_NEAR(p[0], 0.4 / 0.7, 1e-6);
  EXPECT_NEAR(p[1], 0.3 / 0.7, 1e-6);
  EXPECT_EQ(p[2], 0.0f);
  EXPECT_EQ(p[3], 0.0f);
}

}  // namespace
}  // namespace epserve
