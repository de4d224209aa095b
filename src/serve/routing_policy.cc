#include "serve/routing_policy.h"

#include <cmath>
#include <string>

#include "base/check.h"

namespace epserve::serve {

StatusOr<RoutingPolicyKind> ParseRoutingPolicy(std::string_view name) {
  for (auto kind : {RoutingPolicyKind::kRoundRobin, RoutingPolicyKind::kLeastLoad,
                    RoutingPolicyKind::kCacheAware}) {
    if (name == RoutingPolicyName(kind)) return kind;
  }
  return Status::InvalidArgument("unknown routing policy '" + std::string(name) +
                                 "' (valid: round_robin, least_load, cache_aware)");
}

const char* RoutingPolicyName(RoutingPolicyKind kind) {
  switch (kind) {
    case RoutingPolicyKind::kRoundRobin:
      return "round_robin";
    case RoutingPolicyKind::kLeastLoad:
      return "least_load";
    case RoutingPolicyKind::kCacheAware:
      return "cache_aware";
  }
  return "?";
}

const char* RouteReasonName(RouteReason reason) {
  switch (reason) {
    case RouteReason::kCacheHit:
      return "cache_hit";
    case RouteReason::kCacheMiss:
      return "cache_miss";
    case RouteReason::kBalance:
      return "balance";
    case RouteReason::kRoundRobin:
      return "round_robin";
    case RouteReason::kLeastLoad:
      return "least_load";
    case RouteReason::kSibling:
      return "sibling";
  }
  return "?";
}

Status RoutingOptions::Validate() const {
  if (!(cache_threshold >= 0 && cache_threshold <= 1)) {
    return Status::InvalidArgument("cache_threshold must be in [0, 1], got " +
                                   std::to_string(cache_threshold));
  }
  if (balance_abs_threshold < 0) {
    return Status::InvalidArgument("balance_abs_threshold must be >= 0, got " +
                                   std::to_string(balance_abs_threshold));
  }
  if (!(balance_rel_threshold >= 0 && std::isfinite(balance_rel_threshold))) {
    return Status::InvalidArgument("balance_rel_threshold must be a finite number >= 0, got " +
                                   std::to_string(balance_rel_threshold));
  }
  if (max_tree_tokens < 1) {
    return Status::InvalidArgument("max_tree_tokens must be >= 1, got " +
                                   std::to_string(max_tree_tokens));
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<RoutingPolicy>> RoutingPolicy::Create(int num_groups,
                                                               RoutingOptions options) {
  if (num_groups < 1) {
    return Status::InvalidArgument("routing needs at least one group, got " +
                                   std::to_string(num_groups));
  }
  RETURN_IF_ERROR(options.Validate().WithContext("routing options"));
  return std::unique_ptr<RoutingPolicy>(new RoutingPolicy(num_groups, options));
}

RoutingPolicy::RoutingPolicy(int num_groups, RoutingOptions options)
    : num_groups_(num_groups), options_(options), tree_(num_groups, options.max_tree_tokens) {}

RouteDecision RoutingPolicy::Choose(std::span<const int32_t> prompt,
                                    const std::vector<int64_t>& loads,
                                    const std::vector<bool>& up) {
  CHECK(static_cast<int>(loads.size()) == num_groups_ && static_cast<int>(up.size()) == num_groups_)
      << loads.size() << " loads, " << up.size() << " up flags for " << num_groups_ << " groups";
  std::lock_guard<std::mutex> lock(mu_);
  switch (options_.policy) {
    case RoutingPolicyKind::kRoundRobin:
      for (int i = 0; i < num_groups_; ++i) {
        const int g = (next_ + i) % num_groups_;
        if (!up[g]) continue;
        next_ = (g + 1) % num_groups_;
        return {.group = g, .reason = RouteReason::kRoundRobin};
      }
      return {.group = -1, .reason = RouteReason::kRoundRobin};
    case RoutingPolicyKind::kLeastLoad: {
      int best = -1;
      for (int g = 0; g < num_groups_; ++g) {
        if (up[g] && (best < 0 || loads[g] < loads[best])) best = g;
      }
      return {.group = best, .reason = RouteReason::kLeastLoad};
    }
    case RoutingPolicyKind::kCacheAware:
      return ChooseCacheAware(prompt, loads, up);
  }
  return {};
}

RouteDecision RoutingPolicy::ChooseCacheAware(std::span<const int32_t> prompt,
                                              const std::vector<int64_t>& loads,
                                              const std::vector<bool>& up) {
  int least = -1, most = -1;  // over up groups; `least` is the lowest index among ties
  for (int g = 0; g < num_groups_; ++g) {
    if (!up[g]) continue;
    if (least < 0 || loads[g] < loads[least]) least = g;
    if (most < 0 || loads[g] > loads[most]) most = g;
  }
  if (least < 0) return {.group = -1, .reason = RouteReason::kCacheMiss};
  const int64_t min_load = loads[least], max_load = loads[most];
  const std::vector<int64_t> matched = tree_.MatchLengths(prompt);

  RouteDecision decision;
  const bool imbalanced = max_load - min_load > options_.balance_abs_threshold &&
                          static_cast<double>(max_load) >
                              options_.balance_rel_threshold * static_cast<double>(min_load);
  if (imbalanced) {
    decision = {.group = least, .reason = RouteReason::kBalance};
  } else {
    int best = -1;  // longest match; ties: least loaded, then lowest index
    for (int g = 0; g < num_groups_; ++g) {
      if (!up[g]) continue;
      if (best < 0 || matched[g] > matched[best] ||
          (matched[g] == matched[best] && loads[g] < loads[best])) {
        best = g;
      }
    }
    const double rate =
        prompt.empty() ? 0.0
                       : static_cast<double>(matched[best]) / static_cast<double>(prompt.size());
    if (rate > options_.cache_threshold) {
      decision = {.group = best, .reason = RouteReason::kCacheHit};
    } else {
      int smallest = -1;  // fewest tree tokens; ties: least loaded, then lowest index
      for (int g = 0; g < num_groups_; ++g) {
        if (!up[g]) continue;
        if (smallest < 0 || tree_.group_tokens(g) < tree_.group_tokens(smallest) ||
            (tree_.group_tokens(g) == tree_.group_tokens(smallest) && loads[g] < loads[smallest])) {
          smallest = g;
        }
      }
      decision = {.group = smallest, .reason = RouteReason::kCacheMiss};
    }
  }
  decision.matched_tokens = matched[decision.group];
  tree_.Insert(prompt, decision.group);
  return decision;
}

void RoutingPolicy::ForgetGroup(int g) {
  CHECK(g >= 0 && g < num_groups_) << g;
  std::lock_guard<std::mutex> lock(mu_);
  tree_.RemoveGroup(g);
}

int64_t RoutingPolicy::tree_tokens(int g) const {
  CHECK(g >= 0 && g < num_groups_) << g;
  std::lock_guard<std::mutex> lock(mu_);
  return tree_.group_tokens(g);
}

int64_t RoutingPolicy::tree_total_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tree_.total_tokens();
}

}  // namespace epserve::serve
