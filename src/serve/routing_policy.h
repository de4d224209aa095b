// RoutingPolicy: which engine instance ("group", a DP replica) a request goes to, following the
// design of SGLang's router (sgl-router/src/policies/cache_aware.rs).
//
// cache_aware: when the up groups' loads are imbalanced, that is
//     max_load - min_load > balance_abs_threshold  AND  max_load > balance_rel_threshold * min_load
// the least-loaded up group gets the request (kBalance). Otherwise the prompt is matched against
// a PrefixTree of what was routed where: if the best up group's matched fraction of the prompt
// is above cache_threshold, that group gets it (kCacheHit), else the up group holding the fewest
// tokens in the tree (kCacheMiss: most room, least to lose). Either way the prompt is then
// recorded under the chosen group. Ties: least loaded, then lowest index.
// round_robin: the next up group in cyclic order. least_load: the least-loaded up group, ties to
// the lowest index (deterministic; loads move with every routed request, so ties do not stick).
//
// Unlike SGLang, the tree is over token ids (the router tokenizes anyway), loads and imbalance
// are taken over up groups only, the match is per group (SGLang takes the first tenant of the
// deepest matched node), and the tree has one global token bound enforced on insert instead of
// a per-tenant character bound enforced by a background thread.
//
// Thread safety: every method may be called from any thread (one internal mutex; Choose on a
// 2k-token prompt holds it ~10 us, ~1 ms when it runs an eviction batch, which happens once per
// max_tree_tokens / 10 newly recorded tokens).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "serve/prefix_tree.h"

namespace epserve::serve {

enum class RoutingPolicyKind { kRoundRobin, kLeastLoad, kCacheAware };

// "round_robin", "least_load" or "cache_aware"; anything else is an error listing those.
StatusOr<RoutingPolicyKind> ParseRoutingPolicy(std::string_view name);
const char* RoutingPolicyName(RoutingPolicyKind kind);

struct RoutingOptions {
  RoutingPolicyKind policy = RoutingPolicyKind::kCacheAware;
  // The three defaults are sgl-router's CLI defaults: --cache-threshold 0.3,
  // --balance-abs-threshold 64, --balance-rel-threshold 1.5 (sgl-router/src/main.rs CliArgs and
  // py_src/sglang_router/router_args.py RouterArgs; the older CacheAwareConfig::default() in
  // src/policies/mod.rs had 0.5 / 32 / 1.1).
  double cache_threshold = 0.3;        // in [0, 1]; a hit needs matched / prompt > this
  int64_t balance_abs_threshold = 64;  // >= 0, in load units (requests)
  double balance_rel_threshold = 1.5;  // >= 0
  // Bound on PrefixTree::total_tokens(). sgl-router's --max-tree-size is 2^26 = 67108864
  // characters per tenant (~2^24 tokens at ~4 characters a token). A router's guess is only
  // worth what the engines still hold, and one engine instance keeps ~1e5..1e6 tokens of KV,
  // so 2^22 tokens over all groups (e.g. 8 groups x 512k) covers it at ~16 MiB of token ids
  // plus ~150 bytes per node.
  int64_t max_tree_tokens = int64_t{1} << 22;  // >= 1

  Status Validate() const;
};

// kSibling: another choice (n > 1) of the same request runs on that group (its prompt is cached
// there).
enum class RouteReason { kCacheHit, kCacheMiss, kBalance, kRoundRobin, kLeastLoad, kSibling };
// "cache_hit", "cache_miss", "balance", "round_robin", "least_load", "sibling" (metric
// labels).
const char* RouteReasonName(RouteReason reason);

struct RouteDecision {
  int group = -1;  // -1: no group is up
  RouteReason reason = RouteReason::kRoundRobin;
  int64_t matched_tokens = 0;  // cache_aware: prompt tokens the chosen group already held
};

class RoutingPolicy {
 public:
  // InvalidArgument for num_groups < 1 or options that fail Validate.
  static StatusOr<std::unique_ptr<RoutingPolicy>> Create(int num_groups, RoutingOptions options);

  // loads[g]: group g's load (requests in flight from this router, optionally plus the engine's
  // waiting queue); up[g]: whether it is healthy. Picks only up groups; group -1 when none is.
  // REQUIRES: loads.size() == up.size() == num_groups().
  RouteDecision Choose(std::span<const int32_t> prompt, const std::vector<int64_t>& loads,
                       const std::vector<bool>& up);

  // Group g went down or restarted: its cache is gone, so the tree forgets it.
  void ForgetGroup(int g);

  int num_groups() const { return num_groups_; }
  const RoutingOptions& options() const { return options_; }
  // Tokens the tree holds for group g / in all (metrics).
  int64_t tree_tokens(int g) const;
  int64_t tree_total_tokens() const;

 private:
  RoutingPolicy(int num_groups, RoutingOptions options);
  RouteDecision ChooseCacheAware(std::span<const int32_t> prompt, const std::vector<int64_t>& loads,
                                 const std::vector<bool>& up);

  const int num_groups_;
  const RoutingOptions options_;
  mutable std::mutex mu_;
  int next_ = 0;     // round robin: the group to try first (guarded by mu_)
  PrefixTree tree_;  // guarded by mu_
};

}  // namespace epserve::serve
