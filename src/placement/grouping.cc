#include "placement/grouping.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace epserve::placement {
namespace {

// Affinity of every item to every group, kept current as items move.
class GroupAffinity {
 public:
  GroupAffinity(const std::vector<double>& affinity, int n, const Groups& groups)
      : affinity_(affinity),
        n_(n),
        k_(static_cast<int>(groups.size())),
        to_group_(static_cast<size_t>(n) * k_, 0.0),
        group_of_(n, -1) {
    for (int g = 0; g < k_; ++g) {
      for (int m : groups[g]) group_of_[m] = g;
    }
    for (int i = 0; i < n_; ++i) {
      for (int j = 0; j < n_; ++j) {
        if (i != j) to_group_[Index(i, group_of_[j])] += A(i, j);
      }
    }
  }

  // Affinity of item i to the members of group g other than i.
  double ToGroup(int i, int g) const { return to_group_[Index(i, g)]; }
  int group_of(int i) const { return group_of_[i]; }

  void Move(int item, int to, Groups* groups) {
    const int from = group_of_[item];
    auto& src = (*groups)[from];
    src.erase(std::find(src.begin(), src.end(), item));
    auto& dst = (*groups)[to];
    dst.insert(std::upper_bound(dst.begin(), dst.end(), item), item);
    for (int j = 0; j < n_; ++j) {
      if (j == item) continue;
      to_group_[Index(j, from)] -= A(j, item);
      to_group_[Index(j, to)] += A(j, item);
    }
    group_of_[item] = to;
  }

 private:
  double A(int i, int j) const { return affinity_[static_cast<size_t>(i) * n_ + j]; }
  size_t Index(int i, int g) const { return static_cast<size_t>(i) * k_ + g; }

  const std::vector<double>& affinity_;
  int n_;
  int k_;
  std::vector<double> to_group_;
  std::vector<int> group_of_;
};

int Size(const Groups& groups, int g) { return static_cast<int>(groups[g].size()); }

}  // namespace

Groups GroupsFromLabels(const std::vector<int>& labels, int num_groups) {
  Groups groups(num_groups);
  for (int i = 0; i < static_cast<int>(labels.size()); ++i) {
    CHECK(labels[i] >= 0 && labels[i] < num_groups);
    groups[labels[i]].push_back(i);
  }
  return groups;
}

SizeBounds ControlledBounds(int n, int num_groups, double r) {
  const double target = static_cast<double>(n) / num_groups;
  const int delta = std::max(1, static_cast<int>(std::lround(target * r)));
  return SizeBounds{.min_size = std::max(1, static_cast<int>(std::ceil(target - delta - 1e-9))),
                    .max_size = static_cast<int>(std::floor(target + delta + 1e-9))};
}

SizeBounds NonUniformBounds(int n, int num_groups, int min_size) {
  return SizeBounds{.min_size = min_size, .max_size = n - (num_groups - 1) * min_size};
}

StatusOr<Groups> ControlledGrouping(const std::vector<double>& affinity, int n, Groups groups,
                                    SizeBounds bounds) {
  const int k = static_cast<int>(groups.size());
  if (k < 1 || affinity.size() != static_cast<size_t>(n) * n) {
    return Status::InvalidArgument("grouping: affinity is not n x n or there are no groups");
  }
  int total = 0;
  for (const auto& g : groups) total += static_cast<int>(g.size());
  if (total != n) return Status::InvalidArgument("grouping: groups do not cover the n items");
  if (bounds.min_size > bounds.max_size || static_cast<int64_t>(k) * bounds.min_size > n ||
      static_cast<int64_t>(k) * bounds.max_size < n) {
    return Status::InvalidArgument(
        "grouping: " + std::to_string(n) + " items cannot form " + std::to_string(k) +
        " groups of " + std::to_string(bounds.min_size) + ".." + std::to_string(bounds.max_size));
  }
  GroupAffinity aff(affinity, n, groups);
  const double target = static_cast<double>(n) / k;

  // Shrink: the largest group releases its least-affine member first.
  for (;;) {
    int g = -1;
    for (int h = 0; h < k; ++h) {
      if (Size(groups, h) > bounds.max_size && (g < 0 || Size(groups, h) > Size(groups, g))) g = h;
    }
    if (g < 0) break;
    int weakest = groups[g][0];
    for (int m : groups[g]) {
      if (aff.ToGroup(m, g) < aff.ToGroup(weakest, g)) weakest = m;
    }
    int to = -1;
    for (int h = 0; h < k; ++h) {
      if (h == g || Size(groups, h) >= bounds.max_size) continue;
      if (to < 0 || aff.ToGroup(weakest, h) > aff.ToGroup(weakest, to) ||
          (aff.ToGroup(weakest, h) == aff.ToGroup(weakest, to) &&
           Size(groups, h) < Size(groups, to))) {
        to = h;
      }
    }
    CHECK(to >= 0);
    aff.Move(weakest, to, &groups);
  }

  // Grow: the smallest group takes the member whose move costs the least affinity.
  for (;;) {
    int g = -1;
    for (int h = 0; h < k; ++h) {
      if (Size(groups, h) < bounds.min_size && (g < 0 || Size(groups, h) < Size(groups, g))) g = h;
    }
    if (g < 0) break;
    bool any_above_target = false;
    for (int h = 0; h < k; ++h) {
      any_above_target |= Size(groups, h) > bounds.min_size && Size(groups, h) > target;
    }
    int best = -1;
    double best_gain = -std::numeric_limits<double>::infinity();
    for (int h = 0; h < k; ++h) {
      if (h == g || Size(groups, h) <= bounds.min_size) continue;
      if (any_above_target && Size(groups, h) <= target) continue;
      for (int m : groups[h]) {
        const double gain = aff.ToGroup(m, g) - aff.ToGroup(m, h);
        if (gain > best_gain) {
          best_gain = gain;
          best = m;
        }
      }
    }
    CHECK(best >= 0);
    aff.Move(best, g, &groups);
  }
  return groups;
}

double IntraGroupAffinityShare(const std::vector<double>& affinity, int n, const Groups& groups) {
  double total = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) total += affinity[static_cast<size_t>(i) * n + j];
  }
  if (total <= 0) return 1.0;
  double inside = 0;
  for (const auto& g : groups) {
    for (size_t a = 0; a < g.size(); ++a) {
      for (size_t b = a + 1; b < g.size(); ++b) {
        inside += affinity[static_cast<size_t>(g[a]) * n + g[b]];
      }
    }
  }
  return inside / total;
}

double SizeDeviation(const Groups& groups, int n) {
  const double target = static_cast<double>(n) / groups.size();
  double sum = 0;
  for (const auto& g : groups) sum += (g.size() - target) * (g.size() - target);
  return std::sqrt(sum / groups.size());
}

int KneeIndex(const std::vector<CurvePoint>& curve) {
  CHECK(!curve.empty());
  double s_lo = curve[0].s, s_hi = curve[0].s, u_lo = curve[0].u, u_hi = curve[0].u;
  for (const CurvePoint& p : curve) {
    s_lo = std::min(s_lo, p.s);
    s_hi = std::max(s_hi, p.s);
    u_lo = std::min(u_lo, p.u);
    u_hi = std::max(u_hi, p.u);
  }
  const double s_range = s_hi - s_lo;
  const double u_range = u_hi - u_lo;
  int best = 0;
  double best_score = -std::numeric_limits<double>::infinity();
  for (int i = 0; i < static_cast<int>(curve.size()); ++i) {
    const double s = s_range > 0 ? (curve[i].s - s_lo) / s_range : 0.0;
    const double u = u_range > 0 ? (curve[i].u - u_lo) / u_range : 0.0;
    if (u - s > best_score + 1e-12) {
      best_score = u - s;
      best = i;
    }
  }
  return best;
}

StatusOr<KneeGrouping> GroupAtKnee(const std::vector<double>& affinity, int n,
                                   const Groups& clusters, const KneeOptions& options) {
  if (options.r_grid.empty()) return Status::InvalidArgument("grouping: empty r grid");
  const int num_groups = static_cast<int>(clusters.size());
  KneeGrouping result;
  std::vector<Groups> candidates;
  int last_delta = -1;
  for (double r : options.r_grid) {
    if (!(r >= 0)) return Status::InvalidArgument("grouping: r must be >= 0");
    SizeBounds bounds = ControlledBounds(n, num_groups, r);
    bounds.min_size = std::max(bounds.min_size, options.min_size);
    bounds.max_size = std::max(bounds.max_size, bounds.min_size);
    const double target = static_cast<double>(n) / num_groups;
    const int delta = std::max(1, static_cast<int>(std::lround(target * r)));
    // Equal deltas give equal groupings; reuse the previous one.
    if (delta == last_delta) {
      candidates.push_back(candidates.back());
      CurvePoint p = result.curve.back();
      p.r = r;
      result.curve.push_back(p);
      continue;
    }
    last_delta = delta;
    ASSIGN_OR_RETURN(Groups groups, ControlledGrouping(affinity, n, clusters, bounds));
    result.curve.push_back(CurvePoint{.r = r,
                                      .delta = delta,
                                      .u = IntraGroupAffinityShare(affinity, n, groups),
                                      .s = SizeDeviation(groups, n)});
    candidates.push_back(std::move(groups));
  }
  result.knee = KneeIndex(result.curve);
  result.groups = std::move(candidates[result.knee]);
  return result;
}

}  // namespace epserve::placement
