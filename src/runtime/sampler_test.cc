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

}  // namespace
}  // namespace epserve
