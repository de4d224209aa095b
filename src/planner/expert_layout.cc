#include "planner/expert_layout.h"

#include <algorithm>
#include <cmath>

namespace epserve::planner {

int ExpertLayout::MaxSlots() const {
  size_t most = 0;
  for (const std::vector<ExpertSlot>& slots : ranks) most = std::max(most, slots.size());
  return static_cast<int>(most);
}

int ExpertLayout::TotalSlots() const {
  size_t total = 0;
  for (const std::vector<ExpertSlot>& slots : ranks) total += slots.size();
  return static_cast<int>(total);
}

Status ExpertLayout::Validate(int num_experts, const std::string& what) const {
  std::vector<double> share(num_experts, 0);
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (const ExpertSlot& slot : ranks[r]) {
      if (slot.expert < 0 || slot.expert >= num_experts) {
        return Status::InvalidArgument(what + ": rank " + std::to_string(r) + " holds expert " +
                                       std::to_string(slot.expert) + ", outside [0, " +
                                       std::to_string(num_experts) + ")");
      }
      if (!(slot.share > 0 && slot.share <= 1 + 1e-9)) {
        return Status::InvalidArgument(what + ": rank " + std::to_string(r) + "'s copy of expert " +
                                       std::to_string(slot.expert) + " has share " +
                                       std::to_string(slot.share) + ", not in (0, 1]");
      }
      share[slot.expert] += slot.share;
    }
  }
  for (int e = 0; e < num_experts; ++e) {
    if (std::abs(share[e] - 1) > 1e-6) {
      return Status::InvalidArgument(what + ": the copies of expert " + std::to_string(e) +
                                     " serve " + std::to_string(share[e]) +
                                     " of its tokens, not 1" +
                                     (share[e] == 0 ? " (no rank holds it)" : ""));
    }
  }
  return Status::Ok();
}

ExpertLayout ContiguousLayout(int num_experts, int ep) {
  CHECK(ep > 0 && num_experts % ep == 0) << "EP " << ep << " experts " << num_experts;
  const int g = num_experts / ep;
  ExpertLayout layout;
  layout.ranks.resize(ep);
  for (int r = 0; r < ep; ++r) {
    for (int e = r * g; e < (r + 1) * g; ++e) layout.ranks[r].push_back({.expert = e, .share = 1});
  }
  return layout;
}

StatusOr<ExpertLayout> BalancedLayout(const std::vector<double>& expert_load, int ep,
                                      int redundant) {
  const int experts = static_cast<int>(expert_load.size());
  if (ep <= 0 || redundant < 0 || (experts + redundant) % ep != 0) {
    return Status::InvalidArgument(std::to_string(experts) + " experts + " +
                                   std::to_string(redundant) + " redundant slots do not split " +
                                   "evenly over " + std::to_string(ep) + " ranks");
  }
  for (double load : expert_load) {
    if (!(load >= 0)) return Status::InvalidArgument("expert loads must be >= 0");
  }
  std::vector<int> copies(experts, 1);
  for (int i = 0; i < redundant; ++i) {
    int best = 0;
    for (int e = 1; e < experts; ++e) {
      if (expert_load[e] / copies[e] > expert_load[best] / copies[best]) best = e;
    }
    ++copies[best];
  }
  struct Copy {
    int expert;
    double load;
  };
  std::vector<Copy> order;
  for (int e = 0; e < experts; ++e) {
    for (int c = 0; c < copies[e]; ++c) order.push_back({e, expert_load[e] / copies[e]});
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const Copy& a, const Copy& b) { return a.load > b.load; });
  const size_t slots_per_rank = static_cast<size_t>((experts + redundant) / ep);
  ExpertLayout layout;
  layout.ranks.resize(ep);
  std::vector<double> rank_load(ep, 0);
  auto holds = [&](int r, int e) {
    return std::any_of(layout.ranks[r].begin(), layout.ranks[r].end(),
                       [e](const ExpertSlot& s) { return s.expert == e; });
  };
  for (const Copy& copy : order) {
    int pick = -1;
    for (int pass = 0; pass < 2 && pick < 0; ++pass) {  // pass 1 allows a second copy on a rank
      for (int r = 0; r < ep; ++r) {
        if (layout.ranks[r].size() >= slots_per_rank) continue;
        if (pass == 0 && holds(r, copy.expert)) continue;
        if (pick < 0 || rank_load[r] < rank_load[pick]) pick = r;
      }
    }
    CHECK(pick >= 0) << "no free slot";  // total slots = total copies
    layout.ranks[pick].push_back({.expert = copy.expert, .share = 1.0 / copies[copy.expert]});
    rank_load[pick] += copy.load;
  }
  return layout;
}

std::vector<double> LayoutRankLoads(const ExpertLayout& layout,
                                    const std::vector<double>& expert_load) {
  std::vector<double> loads(layout.ranks.size(), 0);
  for (size_t r = 0; r < layout.ranks.size(); ++r) {
    for (const ExpertSlot& slot : layout.ranks[r])
      loads[r] += expert_load[slot.expert] * slot.share;
  }
  return loads;
}

}  // namespace epserve::planner
