#include "placement/grace.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "placement/spectral.h"

namespace epserve::placement {

void SetInverseLoadWeights(const std::vector<double>& rank_load, LayerPlacement* layer) {
  for (auto& copies : layer->copies) {
    if (copies.size() < 2) continue;
    double sum = 0;
    for (ExpertCopy& c : copies) {
      c.weight = rank_load[c.rank] > 0 ? 1.0 / rank_load[c.rank] : 1.0;
      sum += c.weight;
    }
    for (ExpertCopy& c : copies) c.weight /= sum;
  }
}

Status CheckExpertsCoverRanks(int num_experts, const Topology& topology) {
  if (num_experts >= topology.num_ranks()) return Status::Ok();
  return Status::InvalidArgument("GRACE: " + std::to_string(num_experts) +
                                 " experts cannot cover " + std::to_string(topology.num_ranks()) +
                                 " ranks");
}

int ReplicaCount(double w_max, double w_mean, int num_ranks) {
  if (num_ranks < 2 || !(w_mean > 0)) return 0;
  const int skew = static_cast<int>(std::floor(w_max / w_mean));
  return std::min(std::max(1, skew), num_ranks - 1);
}

ReplicationPlan PlanReplication(const std::vector<std::vector<int>>& rank_experts,
                                const std::vector<double>& expert_load, int max_extra_copies) {
  std::vector<std::vector<std::pair<int, double>>> shares(rank_experts.size());
  for (size_t r = 0; r < rank_experts.size(); ++r) {
    for (int e : rank_experts[r]) shares[r].emplace_back(e, expert_load[e]);
  }
  return PlanReplicationOnShares(shares, max_extra_copies);
}

ReplicationPlan PlanReplicationOnShares(
    const std::vector<std::vector<std::pair<int, double>>>& rank_shares, int max_extra_copies) {
  const int num_ranks = static_cast<int>(rank_shares.size());
  ReplicationPlan plan;
  std::vector<double> w(num_ranks, 0.0);
  for (int r = 0; r < num_ranks; ++r) {
    for (const auto& [e, share] : rank_shares[r]) w[r] += share;
  }
  plan.predicted_load = w;
  plan.rank_shares = rank_shares;
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  if (num_ranks < 2 || !(total > 0)) return plan;
  const int heaviest = static_cast<int>(std::max_element(w.begin(), w.end()) - w.begin());
  const double w_max = w[heaviest];
  const double w_mean = total / num_ranks;
  plan.rho = w_max / w_mean;
  int num_replicas = ReplicaCount(w_max, w_mean, num_ranks);
  if (max_extra_copies > 0) num_replicas = std::min(num_replicas, max_extra_copies);

  std::vector<std::pair<int, double>> candidates = rank_shares[heaviest];
  std::stable_sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  });
  const double threshold = w_max * num_replicas / (1.0 + num_replicas);
  double covered = 0;
  std::vector<double> hot_share;
  for (const auto& [e, share] : candidates) {
    if (covered >= threshold && !plan.hot_experts.empty()) break;
    if (!(share > 0)) break;
    plan.hot_experts.push_back(e);
    hot_share.push_back(share);
    covered += share;
  }
  if (max_extra_copies > 0) {
    const size_t fit = static_cast<size_t>(max_extra_copies / num_replicas);
    if (plan.hot_experts.size() > fit) {
      plan.hot_experts.resize(fit);
      hot_share.resize(fit);
    }
  }
  if (plan.hot_experts.empty()) return plan;

  std::vector<int> others;
  for (int r = 0; r < num_ranks; ++r) {
    if (r != heaviest) others.push_back(r);
  }
  std::stable_sort(others.begin(), others.end(), [&](int a, int b) { return w[a] < w[b]; });
  plan.target_ranks.assign(others.begin(), others.begin() + num_replicas);
  plan.heaviest_rank = heaviest;
  plan.num_replicas = num_replicas;
  for (size_t i = 0; i < plan.hot_experts.size(); ++i) {
    const int e = plan.hot_experts[i];
    std::vector<int> targets;
    for (int t : plan.target_ranks) {
      bool holds = false;
      for (const auto& [x, share] : rank_shares[t]) holds |= x == e;
      if (!holds) targets.push_back(t);
    }
    const double part = hot_share[i] / (static_cast<double>(targets.size()) + 1);
    plan.predicted_load[heaviest] -= hot_share[i] - part;
    for (auto& [x, share] : plan.rank_shares[heaviest]) {
      if (x == e) share = part;
    }
    for (int t : targets) {
      plan.predicted_load[t] += part;
      plan.rank_shares[t].emplace_back(e, part);
    }
  }
  return plan;
}

MachineReplicationPlan PlanMachineReplication(const Topology& topology,
                                              const std::vector<std::vector<int>>& rank_experts,
                                              const std::vector<double>& expert_load,
                                              int max_extra_copies) {
  const int num_nodes = topology.num_nodes;
  const int per_node = topology.ranks_per_node;
  MachineReplicationPlan plan;
  plan.rank_shares.resize(rank_experts.size());
  std::vector<double> w(rank_experts.size(), 0.0);
  std::vector<double> node_load(num_nodes, 0.0);
  std::vector<int> home(expert_load.size(), -1);
  for (size_t r = 0; r < rank_experts.size(); ++r) {
    for (int e : rank_experts[r]) {
      plan.rank_shares[r].emplace_back(e, expert_load[e]);
      w[r] += expert_load[e];
      node_load[topology.NodeOf(static_cast<int>(r))] += expert_load[e];
      home[e] = static_cast<int>(r);
    }
  }
  plan.predicted_node_load = node_load;
  const double total = std::accumulate(node_load.begin(), node_load.end(), 0.0);
  if (num_nodes < 2 || !(total > 0)) return plan;
  const int heaviest =
      static_cast<int>(std::max_element(node_load.begin(), node_load.end()) - node_load.begin());
  const double w_max = node_load[heaviest];
  const double w_mean = total / num_nodes;
  plan.rho = w_max / w_mean;
  int num_replicas = ReplicaCount(w_max, w_mean, num_nodes);
  if (max_extra_copies > 0) num_replicas = std::min(num_replicas, max_extra_copies);

  std::vector<int> candidates;
  for (int r = heaviest * per_node; r < (heaviest + 1) * per_node; ++r) {
    candidates.insert(candidates.end(), rank_experts[r].begin(), rank_experts[r].end());
  }
  std::stable_sort(candidates.begin(), candidates.end(), [&](int a, int b) {
    return expert_load[a] > expert_load[b] || (expert_load[a] == expert_load[b] && a < b);
  });
  const double threshold = w_max * num_replicas / (1.0 + num_replicas);
  double covered = 0;
  for (int e : candidates) {
    if (covered >= threshold && !plan.hot_experts.empty()) break;
    if (!(expert_load[e] > 0)) break;
    plan.hot_experts.push_back(e);
    covered += expert_load[e];
  }
  if (max_extra_copies > 0) {
    const size_t fit = static_cast<size_t>(max_extra_copies / num_replicas);
    if (plan.hot_experts.size() > fit) plan.hot_experts.resize(fit);
  }
  if (plan.hot_experts.empty()) return plan;

  std::vector<int> others;
  for (int m = 0; m < num_nodes; ++m) {
    if (m != heaviest) others.push_back(m);
  }
  std::stable_sort(others.begin(), others.end(),
                   [&](int a, int b) { return node_load[a] < node_load[b]; });
  plan.target_nodes.assign(others.begin(), others.begin() + num_replicas);
  plan.heaviest_node = heaviest;
  plan.num_replicas = num_replicas;
  double w_r = 0;
  for (int e : plan.hot_experts) {
    const double part = expert_load[e] / (num_replicas + 1);
    w_r += expert_load[e];
    const int h = home[e];
    w[h] -= expert_load[e] - part;
    for (auto& [x, share] : plan.rank_shares[h]) {
      if (x == e) share = part;
    }
    for (int t : plan.target_nodes) {
      int best = t * per_node;
      for (int r = t * per_node + 1; r < (t + 1) * per_node; ++r) {
        if (w[r] < w[best]) best = r;
      }
      w[best] += part;
      plan.rank_shares[best].emplace_back(e, part);
      plan.copies.emplace_back(e, best);
    }
  }
  const double part_total = w_r / (num_replicas + 1);
  plan.predicted_node_load[heaviest] = w_max - w_r + part_total;
  for (int t : plan.target_nodes) plan.predicted_node_load[t] += part_total;
  return plan;
}

StatusOr<GraceLayerResult> PlaceGraceLayer(const LayerProfile& profile, const Topology& topology,
                                           const GraceOptions& options) {
  const int n = profile.num_experts;
  const int num_nodes = topology.num_nodes;
  const int per_node = topology.ranks_per_node;
  RETURN_IF_ERROR(CheckExpertsCoverRanks(n, topology));
  const std::vector<double>& a = profile.affinity;
  GraceLayerResult result;
  GraceLayerReport& report = result.report;
  report.layer_id = profile.layer_id;

  // Machines: fully non-uniform, except that every rank needs an expert.
  Groups machines;
  if (num_nodes == 1) {
    machines.emplace_back(n);
    std::iota(machines[0].begin(), machines[0].end(), 0);
  } else {
    ASSIGN_OR_RETURN(std::vector<int> labels,
                     SpectralCluster(a, n,
                                     SpectralOptions{.num_clusters = num_nodes,
                                                     .seed = options.seed,
                                                     .kmeans_restarts = options.kmeans_restarts}));
    if (options.machine_grouping == MachineGrouping::kNonUniform) {
      ASSIGN_OR_RETURN(machines, ControlledGrouping(a, n, GroupsFromLabels(labels, num_nodes),
                                                    NonUniformBounds(n, num_nodes, per_node)));
    } else {
      ASSIGN_OR_RETURN(KneeGrouping grouping,
                       GroupAtKnee(a, n, GroupsFromLabels(labels, num_nodes),
                                   KneeOptions{.r_grid = options.r_grid, .min_size = per_node}));
      machines = std::move(grouping.groups);
      report.machine_curve = GraceMachineCurve{
          .node = -1, .num_experts = n, .curve = std::move(grouping.curve), .knee = grouping.knee};
    }
  }
  report.machine_affinity_share = IntraGroupAffinityShare(a, n, machines);

  // Ranks within each machine: controlled grouping with r at the knee.
  const std::vector<double> grid =
      options.fixed_r >= 0 ? std::vector<double>{options.fixed_r} : options.r_grid;
  std::vector<std::vector<int>> rank_experts(topology.num_ranks());
  for (int m = 0; m < num_nodes; ++m) {
    const std::vector<int>& members = machines[m];
    const int nm = static_cast<int>(members.size());
    report.machine_sizes.push_back(nm);
    if (per_node == 1) {
      rank_experts[m] = members;
      continue;
    }
    const std::vector<double> sub = SubAffinity(a, n, members);
    ASSIGN_OR_RETURN(std::vector<int> labels,
                     SpectralCluster(sub, nm,
                                     SpectralOptions{.num_clusters = per_node,
                                                     .seed = options.seed + 1 + m,
                                                     .kmeans_restarts = options.kmeans_restarts}));
    ASSIGN_OR_RETURN(KneeGrouping grouping,
                     GroupAtKnee(sub, nm, GroupsFromLabels(labels, per_node),
                                 KneeOptions{.r_grid = grid, .min_size = 1}));
    for (int g = 0; g < per_node; ++g) {
      auto& experts = rank_experts[m * per_node + g];
      for (int local : grouping.groups[g]) experts.push_back(members[local]);
      std::sort(experts.begin(), experts.end());
    }
    report.curves.push_back(GraceMachineCurve{
        .node = m, .num_experts = nm, .curve = std::move(grouping.curve), .knee = grouping.knee});
  }

  // Replication and the routing weights that follow from the predicted loads.
  LayerPlacement& layer = result.layer;
  layer.layer_id = profile.layer_id;
  layer.slots = rank_experts;
  layer.copies.resize(n);
  for (int r = 0; r < topology.num_ranks(); ++r) {
    for (int e : rank_experts[r]) layer.copies[e].push_back(ExpertCopy{.rank = r, .weight = 1.0});
  }
  if (options.replication) {
    // Machine level, then rank level on the loads the machine-level copies leave.
    std::vector<std::vector<std::pair<int, double>>> shares(topology.num_ranks());
    for (int r = 0; r < topology.num_ranks(); ++r) {
      for (int e : rank_experts[r]) shares[r].emplace_back(e, profile.load[e]);
    }
    int budget = options.max_extra_copies;
    if (options.machine_replication) {
      report.machine_replication =
          PlanMachineReplication(topology, rank_experts, profile.load, budget);
      const MachineReplicationPlan& mplan = report.machine_replication;
      for (const auto& [e, rank] : mplan.copies) {
        layer.slots[rank].push_back(e);
        layer.copies[e].push_back(ExpertCopy{.rank = rank, .weight = 1.0});
      }
      shares = mplan.rank_shares;
      if (budget > 0) {
        budget -= static_cast<int>(mplan.copies.size());
        if (budget <= 0) budget = -1;  // spent: no rank-level copies
      }
    }
    if (budget >= 0) {
      report.replication = PlanReplicationOnShares(shares, budget);
      const ReplicationPlan& plan = report.replication;
      for (int e : plan.hot_experts) {
        for (int t : plan.target_ranks) {
          bool holds = false;
          for (const ExpertCopy& c : layer.copies[e]) holds |= c.rank == t;
          if (holds) continue;
          layer.slots[t].push_back(e);
          layer.copies[e].push_back(ExpertCopy{.rank = t, .weight = 1.0});
        }
      }
      shares = plan.rank_shares;
    }
    // Routing weights: inversely proportional to the predicted load of each copy's rank.
    std::vector<double> predicted(topology.num_ranks(), 0.0);
    for (int r = 0; r < topology.num_ranks(); ++r) {
      for (const auto& [e, share] : shares[r]) predicted[r] += share;
    }
    SetInverseLoadWeights(predicted, &layer);
  }
  if (options.rank_rebalance) {
    report.rebalance = RebalanceRanks(&layer, profile.load, topology, options.routing);
    // Step 6a again, now with loads predicted where the router sends tokens and for the ranks
    // the copies ended up on (the weights above came from the replication step's uniform
    // shares on the ranks before the rebalancing).
    const std::vector<double> predicted =
        PredictRankLoads(layer, profile.load, topology, options.routing);
    SetInverseLoadWeights(predicted, &layer);
    const std::vector<double> after =
        PredictRankLoads(layer, profile.load, topology, options.routing);
    const double mean = std::accumulate(after.begin(), after.end(), 0.0) / after.size();
    if (mean > 0) {
      report.rebalance.max_over_mean_after = *std::max_element(after.begin(), after.end()) / mean;
    }
  }
  return result;
}

}  // namespace epserve::placement
