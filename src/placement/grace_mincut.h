// GRACE with min-cut grouping (`--grouping metis`), one layer: the grouping objective made
// exact. 1) METIS splits the co-activation graph into machines (balanced on load; every machine
// gets at least one expert per rank); 2) a local search (refine.h) moves and swaps experts between
// machines while that lowers the profiled (token, machine) connectivity; 3) copies on other
// machines go to the experts that save the most cross-machine copies per copy, valued on the
// router's own routing of the profile (traffic_copies.h); 4) each machine's experts (originals and
// copies), weighted by the load the router sends them (machine_load.h), are split over its ranks
// by load alone (GraceOptions::rank_grouping; or by affinity like the machines) and 5) copies are
// moved and swapped between the ranks of each machine to even the routed load (rebalance.h). Home
// copies carry the routing weight, so under topology-aware routing a token uses its machine's
// copy, else one on a machine it visits anyway, else the home one.
#pragma once

#include "base/status.h"
#include "placement/affinity.h"
#include "placement/grace.h"
#include "placement/placement.h"
#include "placement/token_sets.h"

namespace epserve::placement {

StatusOr<GraceLayerResult> PlaceGraceMinCutLayer(const LayerProfile& profile, const TokenSets& sets,
                                                 const Topology& topology,
                                                 const GraceOptions& options);

}  // namespace epserve::placement
