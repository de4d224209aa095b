#include "runtime/logits_processor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "runtime/sampler.h"

namespace epserve {
namespace {

constexpr float kNever = -std::numeric_limits<float>::infinity();

TEST(SamplerTest, MinPDropsTokensLessLikelyThanItsShareOfTheLikeliest) {
  // Probabilities ~ {0.5, 0.3, 0.15, 0.05}: min_p 0.5 keeps tokens 0 and 1 (0.3 >= 0.25);
  // min_p 0.7 keeps token 0 alone.
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  Sampler half({.temperature = 1.0f, .min_p = 0.5f, .seed = 11});
  int counts[4] = {0, 0, 0, 0};
  for (int i = 0; i < 4000; ++i) ++counts[half.Sample(l.data(), 4)];
  EXPECT_EQ(counts[2] + counts[3], 0);
  EXPECT_GT(counts[1], 1000);  // ~0.3 / 0.8 of the draws
  Sampler most({.temperature = 1.0f, .min_p = 0.7f, .seed = 11});
  for (int i = 0; i < 200; ++i) EXPECT_EQ(most.Sample(l.data(), 4), 0);
}

TEST(SamplerTest, MaskedTokensAreNeverDrawn) {
  // Token 0 is likeliest but masked; the draws come from {1, 3} only, whatever the seed.
  std::vector<float> l = {5.0f, 0.0f, kNever, -40.0f};
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::vector<float> masked = l;
    masked[0] = kNever;
    Sampler s({.temperature = 1.0f, .seed = seed});
    for (int i = 0; i < 200; ++i) {
      const int32_t t = s.Sample(masked.data(), 4);
      EXPECT_TRUE(t == 1 || t == 3) << t;
    }
  }
}

TEST(LogitsProcessorTest, InactiveReturnsTheRawRow) {
  LogitsProcessor p({}, {1, 2}, {0}, nullptr);
  std::vector<float> l = {1, 2, 3};
  EXPECT_FALSE(p.active());
  EXPECT_EQ(p.Apply(l.data(), 3, 0, 10), l.data());
}

TEST(LogitsProcessorTest, BiasPenaltiesAndMinTokensFollowTheirDefinitions) {
  LogitsAdjustments a{.presence_penalty = 0.5f,
                      .frequency_penalty = 0.25f,
                      .repetition_penalty = 2.0f,
                      .logit_bias = {{3, -1.0f}},
                      .min_tokens = 2};
  // Prompt {4}; stop id 0.
  LogitsProcessor p(a, {4}, {0}, nullptr);
  std::vector<float> l = {1.0f, 2.0f, -2.0f, 3.0f, 4.0f};
  const float* r = p.Apply(l.data(), 5, 0, 10);
  EXPECT_EQ(r[0], kNever);        // min_tokens: 0 generated
  EXPECT_FLOAT_EQ(r[1], 2.0f);    // untouched
  EXPECT_FLOAT_EQ(r[3], 2.0f);    // bias -1
  EXPECT_FLOAT_EQ(r[4], 2.0f);    // in the prompt: 4 / 2 (repetition)
  ASSERT_TRUE(p.Accept(2).ok());  // generated: 2 once
  ASSERT_TRUE(p.Accept(2).ok());  // twice
  r = p.Apply(l.data(), 5, 2, 8);
  EXPECT_FLOAT_EQ(r[0], 1.0f);  // min_tokens reached
  // Token 2: repetition (negative: * 2) -> -4, then presence 0.5 + frequency 0.25 * 2.
  EXPECT_FLOAT_EQ(r[2], -4.0f - 0.5f - 0.5f);
}

// Allows only token `only` until it was accepted once, then only `stop`.
class OneThenStop : public TokenConstraint {
 public:
  OneThenStop(int32_t only, int32_t stop) : only_(only), stop_(stop) {}
  void Restrict(float* l, int vocab, int remaining) override {
    last_remaining = remaining;
    for (int v = 0; v < vocab; ++v)
      if (v != (done_ ? stop_ : only_)) l[v] = kNever;
  }
  Status Accept(int32_t t) override {
    if (t != (done_ ? stop_ : only_)) return Status::InvalidArgument("token not allowed");
    done_ = true;
    return Status::Ok();
  }
  int last_remaining = -1;

 private:
  int32_t only_, stop_;
  bool done_ = false;
};

TEST(LogitsProcessorTest, TheConstraintSeesTheBudgetAndCanRefuse) {
  auto c = std::make_unique<OneThenStop>(2, 0);
  OneThenStop* raw = c.get();
  LogitsProcessor p({}, {}, {0}, std::move(c));
  EXPECT_TRUE(p.active());
  std::vector<float> l = {0, 0, 0, 9};
  const float* r = p.Apply(l.data(), 4, 0, 7);
  EXPECT_EQ(raw->last_remaining, 7);
  EXPECT_EQ(ArgMax(r, 4), 2);
  EXPECT_TRUE(p.Accept(2).ok());
  EXPECT_FALSE(p.Accept(3).ok());
}

}  // namespace
}  // namespace epserve
