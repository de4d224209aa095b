// Replication aimed at cross-machine traffic (GRACE's min-cut variant, step 3): copies of an
// expert on other machines chosen greedily by how many (token, machine) copies each saves per
// copy on the profile, under a load bound per machine. Model (topology-aware routing, tokens
// spread evenly over the machines): a token held on machine m uses m's copy of an expert when
// m has one, else the expert's home copy (the placement gives home copies the routing weight, so
// a token without a local copy goes home); it sends one copy to each other machine it then
// needs. A copy of e on m saves, for each set holding e, count / machines whenever e was that
// set's only expert needing e's home machine from m. A value function.
#pragma once

#include <utility>
#include <vector>

#include "placement/token_sets.h"

namespace epserve::placement {

struct TrafficCopiesOptions {
  int num_nodes = 2;
  std::vector<int> home;     // home[e]: the machine of e's primary copy
  std::vector<double> load;  // profiled load per expert
  int max_copies = 0;        // budget for this layer
  double max_node_load = 0;  // a copy may not push its machine's predicted load past this
};

struct TrafficCopy {
  int expert = 0;
  int node = 0;
  double saved = 0;  // (token, machine) copies saved on the profile, expected
};

struct TrafficCopiesResult {
  std::vector<TrafficCopy> copies;  // in the order chosen
  double cross_before = 0;          // expected (token, machine) copies sent away, profile
  double cross_after = 0;
  std::vector<double> node_load;  // predicted, after the copies
};

TrafficCopiesResult PlanTrafficCopies(const TokenSets& sets, const TrafficCopiesOptions& options);

}  // namespace epserve::placement
