// Places a profiling trace with several strategies and evaluates each on a held-out trace: the
// engine of `epserve place evaluate --compare` and of the real-trace check.
//
// A variant is a strategy name with optional switches joined by '+':
//   contiguous | eplb[+hierarchical|+global][+topo]
//   | grace[+metis|+spectral][+asis][+norep|+nomrep][+norebal][+affranks][+mknee][+wrr]
// e.g. "eplb+global+topo" or "grace+norep" (no replication) or "grace+nomrep" (no machine-level
// replication, only the rank-level step) or "grace+norebal" (no rank-level rebalancing) or
// "grace+affranks" (min-cut: each machine's ranks split by affinity, not by load);
// "+metis" / "+spectral" pick the grouping (default metis) and "+asis" writes what that grouping
// placed instead of the per-layer best candidate on the profile (place.h, Selection). Unless
// `redundant` is set, every eplb variant gets, layer by layer, as many extra copies as the first
// grace variant with replication made, so both spend the same memory; without such a grace
// variant, eplb gets none.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "placement/evaluate.h"
#include "placement/place.h"

namespace epserve::placement {

struct VariantSpec {
  std::string label;
  PlaceOptions place;         // topology, routing, progress and redundancy filled in by Compare
  bool grouping_set = false;  // "+metis" or "+spectral" named the grouping
};

// Parses one variant name. Returns InvalidArgument naming the bad switch.
StatusOr<VariantSpec> ParseVariant(const std::string& name);

// The variants "all" expands to: each step of each strategy switched on in turn.
std::vector<std::string> AllVariants();

struct CompareOptions {
  Topology topology;
  std::vector<std::string> variants = {"contiguous", "eplb", "grace"};
  // >= 0: the copy budget (budget.h), extra slots per layer: eplb gets exactly this many, grace
  // at most this many (0: none). -1: eplb gets, layer by layer, the copies of the first grace
  // variant with replication, which makes its default number.
  int redundant = -1;
  EplbOptions eplb;  // defaults for eplb variants without a mode switch
  GraceOptions grace;
  EvaluateOptions evaluate;
  int selection_deals = 4;  // PlaceOptions::selection_deals of the grace variants
  int num_threads = 1;
  // Called with the variant label, layers done and total, for placing and evaluating in turn.
  std::function<void(const std::string& stage, int done, int total)> progress;
};

struct CompareRow {
  std::string label;
  Placement placement;
  Evaluation evaluation;
};

StatusOr<std::vector<CompareRow>> Compare(const Trace& profile, const Trace& holdout,
                                          const CompareOptions& options);

}  // namespace epserve::placement
