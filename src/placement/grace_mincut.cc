#include "placement/grace_mincut.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "placement/budget.h"
#include "placement/machine_load.h"
#include "placement/mincut.h"
#include "placement/rebalance.h"
#include "placement/refine.h"
#include "placement/traffic_copies.h"

namespace epserve::placement {

namespace {

struct SplitOptions {
  int parts = 1;
  double imbalance = 0;   // part weight over the mean
  double size_slack = 0;  // part size over (under) the mean
  uint64_t seed = 1;
  int num_starts = 1;
  int max_passes = 8;  // of the connectivity search; 0: METIS alone
  int min_size = 1;    // experts every part must hold (a machine: one per rank)
};

// Moves the lightest experts of the largest parts into parts below `min_size`.
void RepairSizes(const std::vector<int>& members, const std::vector<double>& weight, int parts,
                 int min_size, std::vector<int>* part) {
  std::vector<int> size(parts, 0);
  for (int e : members) ++size[(*part)[e]];
  for (int p = 0; p < parts; ++p) {
    while (size[p] < min_size) {
      const int from = static_cast<int>(std::max_element(size.begin(), size.end()) - size.begin());
      int pick = -1;
      for (int e : members) {
        if ((*part)[e] == from && (pick < 0 || weight[e] < weight[pick])) pick = e;
      }
      (*part)[pick] = p;
      --size[from];
      ++size[p];
    }
  }
}

// Splits `members` (experts) into `parts` groups: METIS on their affinity balanced on
// `weight`, parts below `min_size` topped up, then the connectivity search over `sets`
// restricted to them, whose moves keep the sizes within `size_slack` of the mean.
StatusOr<std::vector<int>> Split(const LayerProfile& profile, const TokenSets& sets,
                                 const std::vector<int>& members, const std::vector<double>& weight,
                                 const SplitOptions& so, RefineResult* refine) {
  const int parts = so.parts;
  const double imbalance = so.imbalance, size_slack = so.size_slack;
  const int n = profile.num_experts;
  const int nm = static_cast<int>(members.size());
  std::vector<int> part(n, -1);
  if (parts == 1) {
    for (int e : members) part[e] = 0;
    return part;
  }
  std::vector<double> w(nm);
  double total = 0;
  for (int i = 0; i < nm; ++i) {
    w[i] = weight[members[i]];
    total += w[i];
  }
  const double mean_size = static_cast<double>(nm) / parts;
  RefineOptions ro{.num_parts = parts,
                   .weight = weight,
                   .max_part_weight = (1 + imbalance) * total / parts,
                   .min_part_size = std::max(
                       so.min_size, static_cast<int>(std::floor(mean_size * (1 - size_slack)))),
                   .max_part_size = static_cast<int>(std::ceil(mean_size * (1 + size_slack)))};
  // Several METIS starts, each refined; the lowest connectivity wins.
  const std::vector<double> affinity = SubAffinity(profile.affinity, n, members);
  std::vector<int> best;
  for (int t = 0; t < so.num_starts; ++t) {
    ASSIGN_OR_RETURN(MinCutResult cut, MinCutPartition(affinity, nm,
                                                       MinCutOptions{.num_parts = parts,
                                                                     .constraints = {w},
                                                                     .imbalance = {1 + imbalance},
                                                                     .num_tries = 1,
                                                                     .seed = so.seed + 1000 * t}));
    for (int i = 0; i < nm; ++i) part[members[i]] = cut.part[i];
    RepairSizes(members, weight, parts, so.min_size, &part);
    RefineResult r;
    if (so.max_passes > 0) {
      r = RefineConnectivity(sets, ro, &part);
    } else if (so.num_starts > 1) {
      r.before = r.after = Connectivity(sets, part, parts);
    }
    if (best.empty() || r.after < refine->after) {
      best = part;
      *refine = r;
    }
  }
  part = std::move(best);
  return part;
}

// `members` over `parts` ranks by load alone: heaviest first, each to the lightest rank with
// room (at most ceil(members / parts) experts a rank, so memory stays even). Experts that are
// chosen together are NOT kept together here: the tokens of one step come from related prompts,
// so co-activated experts on one rank make that rank the step's slowest (measured on V2-Lite:
// per-step max/mean rank load 1.46-1.79 split by affinity, 1.33-1.55 by load), while keeping
// them apart costs only NVLink copies inside the machine (4-10% more NVLink time there).
std::vector<int> SplitByLoad(const std::vector<int>& members, const std::vector<double>& load,
                             int parts, int num_experts) {
  std::vector<int> part(num_experts, -1);
  std::vector<int> order = members;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return load[a] > load[b]; });
  std::vector<double> part_load(parts, 0.0);
  std::vector<int> part_size(parts, 0);
  const int cap = (static_cast<int>(members.size()) + parts - 1) / parts;
  for (int e : order) {
    int best = -1;
    for (int p = 0; p < parts; ++p) {
      if (part_size[p] < cap && (best < 0 || part_load[p] < part_load[best])) best = p;
    }
    part[e] = best;
    part_load[best] += load[e];
    ++part_size[best];
  }
  return part;
}

// Steps 4-5 for a machine assignment `home` and copies on other machines.
StatusOr<LayerPlacement> BuildRanks(const LayerProfile& profile, const TokenSets& sets,
                                    const Topology& topology, const GraceOptions& options,
                                    const std::vector<int>& home,
                                    const std::vector<TrafficCopy>& copies,
                                    RebalanceReport* rebalance) {
  const int n = profile.num_experts;
  const int num_nodes = topology.num_nodes;
  const int per_node = topology.ranks_per_node;
  // 4) Ranks of each machine: the experts it serves, weighted by the load routed to them.
  // has[e][m]: machine m serves e (home or copy).
  std::vector<std::vector<char>> has(n, std::vector<char>(num_nodes, 0));
  for (int e = 0; e < n; ++e) has[e][home[e]] = 1;
  for (const TrafficCopy& c : copies) has[c.expert][c.node] = 1;
  LayerPlacement layer;
  layer.layer_id = profile.layer_id;
  layer.slots.assign(topology.num_ranks(), {});
  layer.copies.assign(n, {});
  std::vector<int> rank_of_home(n, -1);
  std::vector<std::pair<int, int>> replica_ranks;  // (expert, rank)
  // What each machine receives from the others: under topology-aware routing, replayed through
  // the router (a token's experts share machines); under weighted routing every copy takes its
  // weight's share of all tokens, which the rank split's estimate below and the rebalancing
  // already model.
  std::vector<double> remote;
  const bool topo = options.routing == RoutingPolicy::kTopology;
  if (topo) {
    std::vector<std::vector<MachineCopy>> machine_copies(n);
    for (int e = 0; e < n; ++e) {
      for (int m = 0; m < num_nodes; ++m) {
        if (has[e][m]) {
          machine_copies[e].push_back(
              MachineCopy{.node = m, .weight = home[e] == m ? 1.0 : options.replica_weight});
        }
      }
    }
    remote = PredictRemoteArrivals(sets, machine_copies, num_nodes, options.routing);
  }
  for (int m = 0; m < num_nodes; ++m) {
    std::vector<int> members;
    std::vector<double> served(n, 0.0);
    for (int e = 0; e < n; ++e) {
      if (!has[e][m]) continue;
      members.push_back(e);
      if (topo) {
        served[e] = profile.load[e] / num_nodes + remote[static_cast<size_t>(e) * num_nodes + m];
        continue;
      }
      int sources = 1;  // its own machine
      if (home[e] == m) {
        for (int o = 0; o < num_nodes; ++o) sources += o != m && !has[e][o];
      }
      served[e] = profile.load[e] * sources / num_nodes;
    }
    std::vector<int> local;
    if (options.rank_grouping == RankGrouping::kLoad) {
      local = SplitByLoad(members, served, per_node, n);
    } else {
      RefineResult rank_refine;
      ASSIGN_OR_RETURN(local, Split(profile, sets, members, served,
                                    SplitOptions{.parts = per_node,
                                                 .imbalance = options.rank_imbalance,
                                                 .size_slack = options.size_slack,
                                                 .seed = options.seed + 1 + m,
                                                 .num_starts = 1,
                                                 .max_passes = options.rank_refine_passes},
                                    &rank_refine));
    }
    for (int e : members) {
      const int rank = m * per_node + local[e];
      layer.slots[rank].push_back(e);
      if (home[e] == m) {
        rank_of_home[e] = rank;
      } else {
        replica_ranks.emplace_back(e, rank);
      }
    }
  }
  for (int e = 0; e < n; ++e) layer.copies[e].push_back(ExpertCopy{.rank = rank_of_home[e]});
  for (const auto& [e, rank] : replica_ranks) {
    layer.copies[e].push_back(ExpertCopy{.rank = rank, .weight = options.replica_weight});
  }
  for (auto& slots : layer.slots) std::sort(slots.begin(), slots.end());

  // 5) Even the ranks of each machine out.
  if (options.rank_rebalance) {
    *rebalance =
        RebalanceRanks(&layer, profile.load, topology, options.routing, topo ? &remote : nullptr);
  }
  return layer;
}

}  // namespace

StatusOr<GraceLayerResult> PlaceGraceMinCutLayer(const LayerProfile& profile, const TokenSets& sets,
                                                 const Topology& topology,
                                                 const GraceOptions& options) {
  const int n = profile.num_experts;
  const int num_nodes = topology.num_nodes;
  const int per_node = topology.ranks_per_node;
  RETURN_IF_ERROR(CheckExpertsCoverRanks(n, topology));
  GraceLayerResult result;
  GraceLayerReport& report = result.report;
  report.layer_id = profile.layer_id;
  const double total_load = std::accumulate(profile.load.begin(), profile.load.end(), 0.0);

  // 1-2) Machines.
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  RefineResult node_refine;
  ASSIGN_OR_RETURN(std::vector<int> home, Split(profile, sets, all, profile.load,
                                                SplitOptions{.parts = num_nodes,
                                                             .imbalance = options.node_imbalance,
                                                             .size_slack = options.size_slack,
                                                             .seed = options.seed,
                                                             .num_starts = options.num_starts,
                                                             .min_size = per_node},
                                                &node_refine));
  // 3) Copies on other machines that save cross-machine traffic.
  const int budget = !options.replication           ? 0
                     : options.max_extra_copies > 0 ? options.max_extra_copies
                                                    : DefaultRedundantSlots(n);
  const TrafficCopiesResult copies = PlanTrafficCopies(
      sets,
      TrafficCopiesOptions{.num_nodes = num_nodes,
                           .home = home,
                           .load = profile.load,
                           .max_copies = budget,
                           .max_node_load = (1 + options.node_imbalance) * total_load / num_nodes,
                           .replica_weight = options.replica_weight});
  report.machine_sizes.assign(num_nodes, 0);
  for (int e = 0; e < n; ++e) ++report.machine_sizes[home[e]];
  report.node_connectivity_before = node_refine.before;
  report.node_connectivity_after = node_refine.after;
  report.cross_before_copies = copies.cross_before;
  report.cross_after_copies = copies.cross_after;
  report.traffic_copies = static_cast<int>(copies.copies.size());

  ASSIGN_OR_RETURN(result.layer, BuildRanks(profile, sets, topology, options, home, copies.copies,
                                            &report.rebalance));
  for (int i = 0; i < options.copy_variants; ++i) {
    const size_t keep = copies.copies.size() * i / options.copy_variants;
    const std::vector<TrafficCopy> prefix(copies.copies.begin(), copies.copies.begin() + keep);
    RebalanceReport unused;
    ASSIGN_OR_RETURN(LayerPlacement fewer,
                     BuildRanks(profile, sets, topology, options, home, prefix, &unused));
    result.fewer_copies.push_back(std::move(fewer));
  }
  return result;
}

}  // namespace epserve::placement
