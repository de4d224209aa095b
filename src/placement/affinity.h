// Per-layer statistics of a trace that every placement strategy starts from (SPEC §8 step 1):
// expert loads W_e and the co-activation affinity A[i][j].
#pragma once

#include <vector>

#include "placement/trace.h"

namespace epserve::placement {

// Statistics of one MoE layer. A value type.
struct LayerProfile {
  int layer_id = 0;
  int num_experts = 0;
  // load[e] = number of tokens routed to expert e.
  std::vector<double> load;
  // affinity[i * num_experts + j] = number of tokens whose top-k holds both i and j (i != j);
  // symmetric with a zero diagonal.
  std::vector<double> affinity;

  double Affinity(int i, int j) const { return affinity[static_cast<size_t>(i) * num_experts + j]; }
};

// Profiles layer `layer_idx` (an index into trace.layer_ids()).
LayerProfile ProfileLayer(const Trace& trace, int layer_idx);

// The sub-matrix of `affinity` (n x n, row-major) on `members`, row-major |members|^2.
std::vector<double> SubAffinity(const std::vector<double>& affinity, int n,
                                const std::vector<int>& members);

}  // namespace epserve::placement
