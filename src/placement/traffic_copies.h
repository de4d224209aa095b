// Replication aimed at cross-machine traffic (GRACE's min-cut variant, step 3): copies of an
// expert on other machines chosen greedily by how many (token, machine) copies each saves per
// copy on the profile, under a load bound per machine.
//
// Model: every set's tokens start evenly on every machine and route through the router between
// machines (machine_load.h; home copies weigh 1, copies `replica_weight`, so with topology-aware
// routing a token uses its machine's copy, else a copy on a machine it visits anyway, else the
// home one). A token sends one copy to each other machine it then visits. The planner keeps, per
// (set, source machine), where each expert is routed, and values a copy of e on machine q by the
// tokens for which e is the only expert taking them to e's machine and q is their own machine or
// one they visit anyway. After each copy the sets holding e are routed again, so the state (the
// traffic and each machine's load) is the router's, and only the value of the next copy is an
// estimate. With two machines the estimate is exact. A value function.
#pragma once

#include <utility>
#include <vector>

#include "placement/token_sets.h"

namespace epserve::placement {

struct TrafficCopiesOptions {
  int num_nodes = 2;
  std::vector<int> home;         // home[e]: the machine of e's primary copy
  std::vector<double> load;      // profiled load per expert
  int max_copies = 0;            // budget for this layer
  double max_node_load = 0;      // a copy may not push its machine's predicted load past this
  double replica_weight = 1e-3;  // routing weight of a copy; home copies weigh 1
};

struct TrafficCopy {
  int expert = 0;
  int node = 0;
  double saved = 0;  // (token, machine) copies it was expected to save on the profile
};

struct TrafficCopiesResult {
  std::vector<TrafficCopy> copies;  // in the order chosen
  double cross_before = 0;          // (token, machine) copies sent away on the profile, routed
  double cross_after = 0;
  std::vector<double> node_load;  // token-expert pairs each machine serves, after the copies
};

TrafficCopiesResult PlanTrafficCopies(const TokenSets& sets, const TrafficCopiesOptions& options);

}  // namespace epserve::placement
