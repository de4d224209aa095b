// Balanced min-cut partitioning of the experts' co-activation graph with METIS (5.1): edge
// weight = affinity (tokens choosing both experts), vertex weights = one or more balance
// constraints (e.g. profiled load and one per expert, for memory). The first step of GRACE's
// min-cut grouping (`--grouping metis`); the connectivity refinement (refine.h) follows it.
// Value functions; METIS keeps no state between calls, so they are safe on distinct arguments
// from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace epserve::placement {

struct MinCutOptions {
  int num_parts = 2;
  // constraints[c][v] >= 0: vertex v's weight under balance constraint c (at least one).
  std::vector<std::vector<double>> constraints;
  // Allowed max part weight over the mean, one per constraint (METIS's ubvec), each > 1.
  std::vector<double> imbalance;
  // METIS (k-way; recursive bisection was several times slower on dense 256-expert graphs)
  // runs this many seeds, and the lowest cut wins.
  int num_tries = 4;
  uint64_t seed = 1;
};

struct MinCutResult {
  std::vector<int> part;  // part[v] in [0, num_parts)
  double cut = 0;         // affinity between parts (each pair once)
};

// Partitions the n vertices of `affinity` (n x n row-major, symmetric, zero diagonal).
// Returns InvalidArgument on inconsistent sizes, Internal when METIS fails.
StatusOr<MinCutResult> MinCutPartition(const std::vector<double>& affinity, int n,
                                       const MinCutOptions& options);

}  // namespace epserve::placement
