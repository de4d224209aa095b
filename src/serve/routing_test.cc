// Unit tests of the router's prefix tree (against a brute-force twin, eviction order, bounded
// memory) and of the routing policies' decisions.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <random>
#include <set>
#include <thread>

#include "base/timer.h"
#include "serve/prefix_tree.h"
#include "serve/routing_policy.h"

namespace epserve::serve {
namespace {

using Tokens = std::vector<int32_t>;
using Lengths = std::vector<int64_t>;

TEST(PrefixTree, InsertMatchAndSplitEdges) {
  PrefixTree tree(2, 1000);
  tree.Insert(Tokens{1, 2, 3, 4, 5}, 0);
  EXPECT_EQ(tree.num_nodes(), 1);
  EXPECT_EQ(tree.MatchLengths(Tokens{1, 2, 3, 9}), (Lengths{3, 0}));
  tree.Insert(Tokens{1, 2, 3, 7}, 1);  // splits {1..5} into {1,2,3} -> {4,5}, adds {7}
  EXPECT_EQ(tree.num_nodes(), 3);
  EXPECT_EQ(tree.group_tokens(0), 5);
  EXPECT_EQ(tree.group_tokens(1), 4);
  EXPECT_EQ(tree.total_tokens(), 9);
  EXPECT_EQ(tree.MatchLengths(Tokens{1, 2, 3, 7, 8}), (Lengths{3, 4}));
  EXPECT_EQ(tree.MatchLengths(Tokens{1, 2, 3, 4, 5, 6}), (Lengths{5, 3}));
  EXPECT_EQ(tree.MatchLengths(Tokens{1, 2, 3, 4}), (Lengths{4, 3}));
  EXPECT_EQ(tree.MatchLengths(Tokens{2, 3}), (Lengths{0, 0}));
  EXPECT_EQ(tree.MatchLengths(Tokens{}), (Lengths{0, 0}));
  tree.Insert(Tokens{1, 2}, 0);  // ends inside an edge: splits it, adds no tokens
  EXPECT_EQ(tree.num_nodes(), 4);
  EXPECT_EQ(tree.group_tokens(0), 5);
  tree.Insert(Tokens{1, 2, 3, 4, 5}, 0);  // already held: nothing changes
  EXPECT_EQ(tree.total_tokens(), 9);
  tree.CheckInvariants();
}

TEST(PrefixTree, RemoveGroupForgetsItAndMergesWhatIsLeft) {
  PrefixTree tree(2, 1000);
  tree.Insert(Tokens{1, 2, 3, 4, 5}, 0);
  tree.Insert(Tokens{1, 2, 3, 7}, 1);
  tree.Insert(Tokens{1, 2}, 0);
  tree.RemoveGroup(0);
  tree.CheckInvariants();
  EXPECT_EQ(tree.group_tokens(0), 0);
  EXPECT_EQ(tree.group_tokens(1), 4);
  EXPECT_EQ(tree.total_tokens(), 4);
  EXPECT_EQ(tree.num_nodes(), 1);  // {1,2} {3} {7}, all group 1's alone, merged into one
  EXPECT_EQ(tree.MatchLengths(Tokens{1, 2, 3, 4, 5}), (Lengths{0, 3}));
  EXPECT_EQ(tree.MatchLengths(Tokens{1, 2, 3, 7}), (Lengths{0, 4}));
  tree.RemoveGroup(1);
  EXPECT_EQ(tree.num_nodes(), 0);
  EXPECT_EQ(tree.total_tokens(), 0);
}

TEST(PrefixTree, EvictsTheLeastRecentlyUsedLeafFirst) {
  const Tokens a = {1, 2, 3, 4}, b = {5, 6, 7, 8}, c = {9, 10, 11, 12};
  {
    PrefixTree tree(2, 10);
    tree.Insert(a, 0);
    tree.Insert(b, 1);
    tree.Insert(a, 0);  // a is now more recent than b
    tree.Insert(c, 0);  // 12 > 10 tokens: evicts down to 9, that is b alone
    tree.CheckInvariants();
    EXPECT_EQ(tree.total_tokens(), 8);
    EXPECT_EQ(tree.MatchLengths(a), (Lengths{4, 0}));
    EXPECT_EQ(tree.MatchLengths(b), (Lengths{0, 0}));
    EXPECT_EQ(tree.MatchLengths(c), (Lengths{4, 0}));
  }
  {
    PrefixTree tree(2, 10);  // the same without refreshing a: a goes
    tree.Insert(a, 0);
    tree.Insert(b, 1);
    tree.Insert(c, 0);
    EXPECT_EQ(tree.MatchLengths(a), (Lengths{0, 0}));
    EXPECT_EQ(tree.MatchLengths(b), (Lengths{0, 4}));
    EXPECT_EQ(tree.MatchLengths(c), (Lengths{4, 0}));
  }
}

TEST(PrefixTree, EvictsOnlyTheLeafPartOfASharedPrefix) {
  PrefixTree tree(1, 10);
  tree.Insert(Tokens{1, 2, 3, 4, 5, 6}, 0);
  tree.Insert(Tokens{1, 2, 3, 7, 8, 9}, 0);
  EXPECT_EQ(tree.num_nodes(), 3);
  tree.Insert(Tokens{20, 21}, 0);  // 11 tokens: {4,5,6} is the oldest leaf
  tree.CheckInvariants();
  EXPECT_EQ(tree.total_tokens(), 8);
  EXPECT_EQ(tree.num_nodes(), 2);  // {1,2,3} merged with {7,8,9}
  EXPECT_EQ(tree.MatchLengths(Tokens{1, 2, 3, 4}), (Lengths{3}));
  EXPECT_EQ(tree.MatchLengths(Tokens{1, 2, 3, 7, 8, 9}), (Lengths{6}));
}

TEST(PrefixTree, AGroupLeafMayBeAnotherGroupsInnerNode) {
  PrefixTree tree(2, 12);
  tree.Insert(Tokens{1, 2, 3}, 1);
  tree.Insert(Tokens{1, 2, 3, 4, 5, 6}, 0);
  tree.Insert(Tokens{7, 8, 9, 10}, 0);  // 13 tokens: group 1's {1,2,3} is the oldest leaf
  tree.CheckInvariants();
  EXPECT_EQ(tree.total_tokens(), 10);
  EXPECT_EQ(tree.MatchLengths(Tokens{1, 2, 3, 4, 5, 6}), (Lengths{6, 0}));
  EXPECT_EQ(tree.MatchLengths(Tokens{7, 8, 9, 10}), (Lengths{4, 0}));
}

TEST(PrefixTree, EvictsInBatchesDownToNinetyPercent) {
  PrefixTree tree(1, 100);
  auto prompt = [](int i) {
    Tokens t(10);
    for (int j = 0; j < 10; ++j) t[j] = i * 100 + j;
    return t;
  };
  for (int i = 0; i < 10; ++i) tree.Insert(prompt(i), 0);
  EXPECT_EQ(tree.total_tokens(), 100);  // at the bound, not over it
  tree.Insert(prompt(10), 0);           // 110: evicts the two oldest
  EXPECT_EQ(tree.total_tokens(), 90);
  EXPECT_EQ(tree.MatchLengths(prompt(0)), (Lengths{0}));
  EXPECT_EQ(tree.MatchLengths(prompt(1)), (Lengths{0}));
  EXPECT_EQ(tree.MatchLengths(prompt(2)), (Lengths{10}));
  tree.Insert(prompt(11), 0);  // 100: no eviction
  EXPECT_EQ(tree.total_tokens(), 100);
}

// The brute-force twin: a group's match is its longest common prefix with any prompt it was
// given, and its token count the number of distinct non-empty prefixes of those prompts.
TEST(PrefixTree, MatchesABruteForceTwin) {
  constexpr int kGroups = 3;
  std::mt19937 rng(7);
  PrefixTree tree(kGroups, int64_t{1} << 30);
  std::vector<std::vector<Tokens>> given(kGroups);
  auto random_tokens = [&](int max_len) {
    Tokens t(rng() % (max_len + 1));
    for (int32_t& x : t) x = static_cast<int32_t>(rng() % 3);  // a tiny vocabulary: many splits
    return t;
  };
  for (int step = 0; step < 600; ++step) {
    const int g = static_cast<int>(rng() % kGroups);
    if (step % 150 == 149) {
      tree.RemoveGroup(g);
      given[g].clear();
    } else {
      Tokens t = random_tokens(12);
      tree.Insert(t, g);
      given[g].push_back(std::move(t));
    }
    if (step % 10 != 0) continue;
    tree.CheckInvariants();
    for (int q = 0; q < 20; ++q) {
      const Tokens query = random_tokens(14);
      const Lengths got = tree.MatchLengths(query);
      for (int h = 0; h < kGroups; ++h) {
        int64_t want = 0;
        for (const Tokens& t : given[h]) {
          const size_t n = std::min(t.size(), query.size());
          want = std::max<int64_t>(
              want, std::mismatch(t.begin(), t.begin() + n, query.begin()).first - t.begin());
        }
        ASSERT_EQ(got[h], want) << "step " << step << " group " << h;
      }
    }
    for (int h = 0; h < kGroups; ++h) {
      std::set<Tokens> prefixes;
      for (const Tokens& t : given[h]) {
        for (size_t n = 1; n <= t.size(); ++n) prefixes.insert(Tokens(t.begin(), t.begin() + n));
      }
      ASSERT_EQ(tree.group_tokens(h), static_cast<int64_t>(prefixes.size())) << "group " << h;
    }
  }
}

TEST(PrefixTree, StaysBoundedUnderALongRandomInsertStream) {
  constexpr int kGroups = 4;
  constexpr int64_t kMax = 4096;
  std::mt19937 rng(11);
  std::vector<Tokens> system_prompts(8);
  for (Tokens& s : system_prompts) {
    s.resize(50);
    for (int32_t& x : s) x = static_cast<int32_t>(rng() % 1000);
  }
  PrefixTree tree(kGroups, kMax);
  int64_t peak_nodes = 0;
  for (int step = 0; step < 100000; ++step) {
    Tokens t;
    if (rng() % 10 < 7) t = system_prompts[rng() % system_prompts.size()];
    const size_t suffix = rng() % 100;
    for (size_t i = 0; i < suffix; ++i) t.push_back(static_cast<int32_t>(rng() % 1000));
    tree.Insert(t, static_cast<int>(rng() % kGroups));
    if (step % 9973 == 0) tree.RemoveGroup(static_cast<int>(rng() % kGroups));
    ASSERT_LE(tree.total_tokens(), kMax) << "step " << step;
    ASSERT_LE(tree.num_nodes(), tree.total_tokens()) << "step " << step;
    peak_nodes = std::max(peak_nodes, tree.num_nodes());
    if (step % 5000 == 0) tree.CheckInvariants();
  }
  tree.CheckInvariants();
  EXPECT_GT(tree.total_tokens(), kMax / 2);  // it was filled, not emptied
  EXPECT_LE(peak_nodes, kMax);
}

std::unique_ptr<RoutingPolicy> MakePolicy(int num_groups, RoutingOptions options = {}) {
  auto policy = RoutingPolicy::Create(num_groups, options);
  EXPECT_TRUE(policy.ok()) << policy.status().message();
  return std::move(policy).value();
}

Tokens Range(int32_t begin, int32_t end) {
  Tokens t;
  for (int32_t x = begin; x < end; ++x) t.push_back(x);
  return t;
}

TEST(RoutingPolicy, ParsesNamesAndValidatesOptions) {
  EXPECT_EQ(*ParseRoutingPolicy("round_robin"), RoutingPolicyKind::kRoundRobin);
  EXPECT_EQ(*ParseRoutingPolicy("least_load"), RoutingPolicyKind::kLeastLoad);
  EXPECT_EQ(*ParseRoutingPolicy("cache_aware"), RoutingPolicyKind::kCacheAware);
  auto bad = ParseRoutingPolicy("random");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "unknown routing policy 'random' (valid: round_robin, least_load, cache_aware)");
  EXPECT_STREQ(RouteReasonName(RouteReason::kCacheHit), "cache_hit");
  EXPECT_STREQ(RouteReasonName(RouteReason::kCacheMiss), "cache_miss");
  EXPECT_STREQ(RouteReasonName(RouteReason::kBalance), "balance");
  EXPECT_STREQ(RouteReasonName(RouteReason::kRoundRobin), "round_robin");
  EXPECT_STREQ(RouteReasonName(RouteReason::kLeastLoad), "least_load");

  const RoutingOptions defaults;
  EXPECT_EQ(defaults.policy, RoutingPolicyKind::kCacheAware);
  EXPECT_EQ(defaults.cache_threshold, 0.3);
  EXPECT_EQ(defaults.balance_abs_threshold, 64);
  EXPECT_EQ(defaults.balance_rel_threshold, 1.5);
  EXPECT_EQ(defaults.max_tree_tokens, int64_t{1} << 22);
  EXPECT_TRUE(defaults.Validate().ok());
  EXPECT_FALSE(RoutingPolicy::Create(0, {}).ok());
  EXPECT_FALSE(RoutingPolicy::Create(2, {.cache_threshold = 1.5}).ok());
  EXPECT_FALSE(RoutingPolicy::Create(2, {.balance_abs_threshold = -1}).ok());
  EXPECT_FALSE(RoutingPolicy::Create(2, {.balance_rel_threshold = -0.5}).ok());
  EXPECT_FALSE(RoutingPolicy::Create(2, {.max_tree_tokens = 0}).ok());
}

TEST(RoutingPolicy, RoundRobinSkipsDownGroups) {
  auto policy = MakePolicy(4, {.policy = RoutingPolicyKind::kRoundRobin});
  const std::vector<int64_t> loads(4, 0);
  const std::vector<bool> up = {true, false, true, true};
  std::vector<int> got;
  for (int i = 0; i < 5; ++i) got.push_back(policy->Choose({}, loads, up).group);
  EXPECT_EQ(got, (std::vector<int>{0, 2, 3, 0, 2}));
  EXPECT_EQ(policy->Choose({}, loads, {true, true, false, false}).group, 0);  // after 2: 3, 0
  EXPECT_EQ(policy->Choose({}, loads, std::vector<bool>(4, false)).group, -1);
  EXPECT_EQ(policy->Choose({}, loads, up).reason, RouteReason::kRoundRobin);
}

TEST(RoutingPolicy, LeastLoadPicksTheLowestIndexAmongTies) {
  auto policy = MakePolicy(4, {.policy = RoutingPolicyKind::kLeastLoad});
  const std::vector<bool> all(4, true);
  const RouteDecision d = policy->Choose({}, {5, 3, 3, 9}, all);
  EXPECT_EQ(d.group, 1);
  EXPECT_EQ(d.reason, RouteReason::kLeastLoad);
  EXPECT_EQ(policy->Choose({}, {5, 3, 3, 9}, {true, false, false, true}).group, 0);
  EXPECT_EQ(policy->Choose({}, {5, 3, 3, 9}, std::vector<bool>(4, false)).group, -1);
}

TEST(RoutingPolicy, CacheAwareHitsAboveTheThresholdAndMissesToTheSmallestTree) {
  auto policy = MakePolicy(3);
  const std::vector<int64_t> idle(3, 0);
  const std::vector<bool> all(3, true);
  const Tokens p = Range(0, 10), q = Range(100, 110);
  RouteDecision d = policy->Choose(p, idle, all);
  EXPECT_EQ(d.group, 0);  // every tree empty: lowest index
  EXPECT_EQ(d.reason, RouteReason::kCacheMiss);
  d = policy->Choose(q, idle, all);
  EXPECT_EQ(d.group, 1);  // group 0 holds 10 tokens now
  EXPECT_EQ(d.reason, RouteReason::kCacheMiss);
  d = policy->Choose(p, idle, all);
  EXPECT_EQ(d.group, 0);
  EXPECT_EQ(d.reason, RouteReason::kCacheHit);
  EXPECT_EQ(d.matched_tokens, 10);
  Tokens p6 = Range(0, 4);  // 4 of 10 = 0.4 > 0.3: hit
  for (int32_t x : Range(500, 506)) p6.push_back(x);
  d = policy->Choose(p6, idle, all);
  EXPECT_EQ(d.group, 0);
  EXPECT_EQ(d.reason, RouteReason::kCacheHit);
  EXPECT_EQ(d.matched_tokens, 4);
  Tokens p3 = Range(0, 3);  // 3 of 10 = 0.3, not above it: miss, to group 2 (empty tree)
  for (int32_t x : Range(600, 607)) p3.push_back(x);
  d = policy->Choose(p3, idle, all);
  EXPECT_EQ(d.group, 2);
  EXPECT_EQ(d.reason, RouteReason::kCacheMiss);
  EXPECT_EQ(d.matched_tokens, 0);
  EXPECT_EQ(policy->tree_tokens(2), 10);  // the miss was recorded
  d = policy->Choose(p3, idle, all);
  EXPECT_EQ(d.group, 2);
  EXPECT_EQ(d.reason, RouteReason::kCacheHit);
}

TEST(RoutingPolicy, CacheAwareBalancesWhenBothThresholdsAreCrossed) {
  auto policy = MakePolicy(2);
  const std::vector<bool> all(2, true);
  const Tokens p = Range(0, 20);
  EXPECT_EQ(policy->Choose(p, {0, 0}, all).group, 0);
  // diff 65 > 64 and 65 > 1.5 * 0: balance, against the cache.
  RouteDecision d = policy->Choose(p, {65, 0}, all);
  EXPECT_EQ(d.group, 1);
  EXPECT_EQ(d.reason, RouteReason::kBalance);
  EXPECT_EQ(d.matched_tokens, 0);
  EXPECT_EQ(policy->tree_tokens(1), 20);  // still recorded for the chosen group
  // Both hold p now: a hit goes to the less loaded one, ties to the lower index.
  EXPECT_EQ(policy->Choose(p, {3, 2}, all).group, 1);
  EXPECT_EQ(policy->Choose(p, {2, 2}, all).group, 0);
  const Tokens q = Range(100, 110);  // q lives on group 0 only
  EXPECT_EQ(policy->Choose(q, {0, 1}, all).group, 0);
  EXPECT_EQ(policy->Choose(q, {64, 0}, all).reason, RouteReason::kCacheHit);     // diff 64
  EXPECT_EQ(policy->Choose(q, {300, 200}, all).reason, RouteReason::kCacheHit);  // 300 = 1.5x
  d = policy->Choose(q, {301, 200}, all);
  EXPECT_EQ(d.group, 1);
  EXPECT_EQ(d.reason, RouteReason::kBalance);
}

TEST(RoutingPolicy, CacheAwareIgnoresDownGroups) {
  auto policy = MakePolicy(3);
  const std::vector<bool> all(3, true);
  const Tokens p = Range(0, 10), q = Range(100, 120);
  EXPECT_EQ(policy->Choose(p, {0, 0, 0}, all).group, 0);
  EXPECT_EQ(policy->Choose(q, {0, 0, 0}, all).group, 1);
  // Group 0 holds p but is down: p misses, to the smallest up tree (group 2).
  RouteDecision d = policy->Choose(p, {0, 0, 0}, {false, true, true});
  EXPECT_EQ(d.group, 2);
  EXPECT_EQ(d.reason, RouteReason::kCacheMiss);
  // A down group's load does not make the up ones imbalanced: q hits group 1.
  d = policy->Choose(q, {1000, 5, 0}, {false, true, true});
  EXPECT_EQ(d.group, 1);
  EXPECT_EQ(d.reason, RouteReason::kCacheHit);
  EXPECT_EQ(policy->Choose(p, {0, 0, 0}, std::vector<bool>(3, false)).group, -1);
}

TEST(RoutingPolicy, ForgetGroupDropsItsCache) {
  auto policy = MakePolicy(2);
  const std::vector<bool> all(2, true);
  const Tokens p = Range(0, 10), q = Range(100, 105);
  EXPECT_EQ(policy->Choose(p, {0, 0}, all).group, 0);
  EXPECT_EQ(policy->Choose(q, {0, 0}, all).group, 1);
  EXPECT_EQ(policy->Choose(p, {0, 0}, all).reason, RouteReason::kCacheHit);
  policy->ForgetGroup(0);
  EXPECT_EQ(policy->tree_tokens(0), 0);
  EXPECT_EQ(policy->tree_total_tokens(), 5);
  const RouteDecision d = policy->Choose(p, {0, 0}, all);
  EXPECT_EQ(d.group, 0);  // a miss now, to the emptiest tree
  EXPECT_EQ(d.reason, RouteReason::kCacheMiss);
  EXPECT_EQ(d.matched_tokens, 0);
}

TEST(RoutingPolicy, ConcurrentChoosesStayConsistent) {
  constexpr int kGroups = 4, kThreads = 8, kCalls = 2000;
  auto policy = MakePolicy(kGroups, {.max_tree_tokens = 20000});
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < kCalls; ++i) {
        Tokens prompt = Range(0, 40 + static_cast<int32_t>(rng() % 8) * 10);
        for (int j = 0; j < 30; ++j) prompt.push_back(static_cast<int32_t>(rng() % 5000));
        std::vector<int64_t> loads(kGroups);
        for (int64_t& l : loads) l = static_cast<int64_t>(rng() % 100);
        std::vector<bool> up(kGroups, true);
        up[rng() % kGroups] = rng() % 4 != 0;
        const RouteDecision d = policy->Choose(prompt, loads, up);
        if (d.group < 0 || d.group >= kGroups || !up[d.group]) ++bad;
        if (t == 0 && i % 500 == 499) policy->ForgetGroup(static_cast<int>(rng() % kGroups));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(policy->tree_total_tokens(), 20000);
  EXPECT_GT(policy->tree_total_tokens(), 0);
}

TEST(RoutingPolicy, ChoosesOnLongPromptsInMicroseconds) {
  auto policy = MakePolicy(8);
  std::mt19937 rng(3);
  const Tokens system = Range(0, 1500);
  std::vector<Tokens> prompts(256, system);
  for (Tokens& p : prompts) {
    for (int j = 0; j < 548; ++j) p.push_back(static_cast<int32_t>(rng() % 100000));
  }
  const std::vector<int64_t> loads(8, 1);
  const std::vector<bool> up(8, true);
  constexpr int kCalls = 2000;
  const double start = NowSeconds();
  for (int i = 0; i < kCalls; ++i) (void)policy->Choose(prompts[i % prompts.size()], loads, up);
  const double per_call_us = (NowSeconds() - start) / kCalls * 1e6;
  std::printf("Choose on a 2048-token prompt: %.1f us\n", per_call_us);
  EXPECT_LT(per_call_us, 2000.0);
}

}  // namespace
}  // namespace epserve::serve
