// Controlled non-uniform grouping (SPEC §8 step 3): bring spectral clusters within the allowed
// sizes [E - delta, E + delta] while keeping as much co-activation inside groups as possible,
// and pick the ratio r = delta / E at the knee of intra-group affinity share U(r) against size
// deviation S(r).
#pragma once

#include <vector>

#include "base/status.h"

namespace epserve::placement {

// groups[g] = the members (indices into the affinity matrix) of group g, ascending.
using Groups = std::vector<std::vector<int>>;

struct SizeBounds {
  int min_size = 1;
  int max_size = 1;
};

Groups GroupsFromLabels(const std::vector<int>& labels, int num_groups);

// E = n / num_groups, delta = max(1, round(E * r)), sizes [max(1, ceil(E - delta)),
// floor(E + delta)].
SizeBounds ControlledBounds(int n, int num_groups, double r);

// Sizes that only keep every group at least `min_size` large ("fully non-uniform").
SizeBounds NonUniformBounds(int n, int num_groups, int min_size);

// Moves members until every group size lies within `bounds`. An oversized group releases its
// least-affine member (lowest affinity to the rest of its group) to the group, with room, that
// gains the most affinity; an undersized group then takes the member of a group above the
// target size whose move loses the least (affinity to the taker minus affinity to its group).
// Returns InvalidArgument when no partition of n items into groups.size() groups fits.
StatusOr<Groups> ControlledGrouping(const std::vector<double>& affinity, int n, Groups groups,
                                    SizeBounds bounds);

// U = sum over groups of sum_{i<j in group} A_ij / sum_{i<j} A_ij (1 for a graph with no edges).
double IntraGroupAffinityShare(const std::vector<double>& affinity, int n, const Groups& groups);
// S = sqrt(1/D sum_d (|C_d| - E)^2) with E = n / D.
double SizeDeviation(const Groups& groups, int n);

struct CurvePoint {
  double r = 0;
  int delta = 0;
  double u = 0;  // intra-group affinity share
  double s = 0;  // size deviation
};

// The knee of U against S: with both scaled to [0, 1] over the curve, the point that maximizes
// U - S (the largest gain in affinity per unit of deviation; Kneedle for a concave rise). Ties
// go to the earlier point (smaller r). REQUIRES: !curve.empty().
int KneeIndex(const std::vector<CurvePoint>& curve);

struct KneeGrouping {
  Groups groups;
  std::vector<CurvePoint> curve;  // one point per r of the grid
  int knee = 0;                   // index of the chosen point
};

struct KneeOptions {
  std::vector<double> r_grid;  // ratios to try, ascending
  int min_size = 1;            // no group smaller than this, whatever r allows
};

// Runs ControlledGrouping from `clusters` (e.g. spectral clusters) for every r of the grid and
// keeps the grouping at the knee.
StatusOr<KneeGrouping> GroupAtKnee(const std::vector<double>& affinity, int n,
                                   const Groups& clusters, const KneeOptions& options);

}  // namespace epserve::placement
