// Local search on the real traffic objective (GRACE's min-cut grouping, step 2): experts are
// moved, or swapped in pairs, between parts (machines, or the ranks of one machine) while that
// lowers the profiled connectivity  sum over token sets s of count(s) * (distinct parts among
// s's experts)  - what a hierarchical all-to-all pays: one copy per token and destination part,
// so each extra part a token's experts span costs one copy (for tokens spread evenly over the
// parts, the expected copies sent away are this times (1 - 1/parts)). Moves keep every part's
// weight under a bound and its size within limits. Fiduccia-Mattheyses passes (the best move
// even when it loses, lock, roll back to the best prefix), with gains kept per expert and part
// and updated through the moved expert's sets only; then the best swap of two experts when no
// pass helps. A value function, safe on distinct arguments from any thread.
#pragma once

#include <vector>

#include "placement/token_sets.h"

namespace epserve::placement {

struct RefineOptions {
  int num_parts = 2;
  // weight[e]: what the balance bound counts (the profiled load); for every expert of the sets.
  std::vector<double> weight;
  // A move or swap may not leave a part heavier than this, unless it makes the heaviest part of
  // the two lighter (so a start that breaks the bound can only improve).
  double max_part_weight = 0;
  int min_part_size = 1;
  int max_part_size = 1 << 30;
  // Swaps are tried among the this many best-gaining experts of each part, per pair of parts.
  int swap_candidates = 16;
  int max_passes = 8;
  // Tests: CHECK the incrementally kept gains against a recount after every move.
  bool check_gains = false;
};

struct RefineResult {
  double before = 0;  // connectivity of the start
  double after = 0;
  int moves = 0;
  int swaps = 0;
};

// Connectivity of `part` (part[e] in [0, num_parts), or -1 for an expert left out: it counts
// for no part, e.g. the other machines' experts when refining one machine's ranks).
double Connectivity(const TokenSets& sets, const std::vector<int>& part, int num_parts);

// Improves `part` in place. REQUIRES: part->size() == sets.num_experts() == weight.size().
RefineResult RefineConnectivity(const TokenSets& sets, const RefineOptions& options,
                                std::vector<int>* part);

}  // namespace epserve::placement
