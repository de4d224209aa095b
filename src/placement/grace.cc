#include "placement/grace.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "placement/spectral.h"

namespace epserve::placement {

int ReplicaCount(double w_max, double w_mean, int num_ranks) {
  if (num_ranks < 2 || !(w_mean > 0)) return 0;
  const int skew = static_cast<int>(std::floor(w_max / w_mean));
  return std::min(std::max(1, skew), num_ranks - 1);
}

ReplicationPlan PlanReplication(const std::vector<std::vector<int>>& rank_experts,
                                const std::vector<double>& expert_load, int max_extra_copies) {
  const int num_ranks = static_cast<int>(rank_experts.size());
  ReplicationPlan plan;
  std::vector<double> w(num_ranks, 0.0);
  for (int r = 0; r < num_ranks; ++r) {
    for (int e : rank_experts[r]) w[r] += expert_load[e];
  }
  plan.predicted_load = w;
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  if (num_ranks < 2 || !(total > 0)) return plan;
  const int heaviest = static_cast<int>(std::max_element(w.begin(), w.end()) - w.begin());
  const double w_max = w[heaviest];
  const double w_mean = total / num_ranks;
  plan.rho = w_max / w_mean;
  int num_replicas = ReplicaCount(w_max, w_mean, num_ranks);
  if (max_extra_copies > 0) num_replicas = std::min(num_replicas, max_extra_copies);

  std::vector<int> candidates = rank_experts[heaviest];
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
  for (int r = 0; r < num_ranks; ++r) {
    if (r != heaviest) others.push_back(r);
  }
  std::stable_sort(others.begin(), others.end(), [&](int a, int b) { return w[a] < w[b]; });
  plan.target_ranks.assign(others.begin(), others.begin() + num_replicas);
  plan.heaviest_rank = heaviest;
  plan.num_replicas = num_replicas;
  double w_r = 0;
  for (int e : plan.hot_experts) w_r += expert_load[e];
  const double share = w_r / (num_replicas + 1);
  plan.predicted_load[heaviest] = w_max - w_r + share;
  for (int t : plan.target_ranks) plan.predicted_load[t] += share;
  return plan;
}

StatusOr<GraceLayerResult> PlaceGraceLayer(const LayerProfile& profile, const Topology& topology,
                                           const GraceOptions& options) {
  const int n = profile.num_experts;
  const int num_nodes = topology.num_nodes;
  const int per_node = topology.ranks_per_node;
  if (n < topology.num_ranks()) {
    return Status::InvalidArgument("GRACE: " + std::to_string(n) + " experts cannot cover " +
                                   std::to_string(topology.num_ranks()) + " ranks");
  }
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
    report.replication = PlanReplication(rank_experts, profile.load, options.max_extra_copies);
    const ReplicationPlan& plan = report.replication;
    for (int e : plan.hot_experts) {
      layer.copies[e][0].weight = 1.0 / plan.predicted_load[plan.heaviest_rank];
      for (int t : plan.target_ranks) {
        layer.slots[t].push_back(e);
        layer.copies[e].push_back(ExpertCopy{.rank = t, .weight = 1.0 / plan.predicted_load[t]});
      }
      double sum = 0;
      for (const ExpertCopy& c : layer.copies[e]) sum += c.weight;
      for (ExpertCopy& c : layer.copies[e]) c.weight /= sum;
    }
  }
  return result;
}

}  // namespace epserve::placement
