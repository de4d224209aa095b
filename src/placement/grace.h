// GRACE-MoE placement of one layer (SPEC §8): hierarchical affinity grouping (machines fully
// non-uniform, ranks controlled with r at the knee), then load-skew-driven replication, applied
// like the grouping at both levels of the hierarchy: the hot experts of the heaviest machine are
// copied to the least-loaded ranks of the least-loaded machines, then the hot experts of the
// heaviest rank to the least-loaded ranks; routing weights follow from the predicted loads.
// Last, copies are moved and swapped between the ranks of each machine to even out the loads
// the routing policy is predicted to give them (rebalance.h); machines keep their experts.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "base/status.h"
#include "placement/affinity.h"
#include "placement/grouping.h"
#include "placement/placement.h"
#include "placement/rebalance.h"

namespace epserve::placement {

// How experts are split over machines (SPEC §8 step 4).
enum class MachineGrouping {
  kNonUniform,  // the spec: fully non-uniform, every machine at least one expert per rank
  kControlled,  // like the ranks: controlled sizes with r at the knee (an experiment)
};

// How experts are grouped into machines and ranks.
enum class Grouping {
  kSpectral,  // SPEC §8: spectral clustering + k-means, controlled sizes, r at the knee
  kMinCut,    // METIS min-cut, then local search on the profiled connectivity (grace_mincut.h)
};

// Min-cut grouping: how each machine's experts are split over its ranks.
enum class RankGrouping {
  kLoad,      // by load alone, heaviest first onto the lightest rank (evens each step's load)
  kAffinity,  // METIS on the co-activation graph, like the machines (fewer NVLink copies)
};

struct GraceOptions {
  Grouping grouping = Grouping::kMinCut;
  // Min-cut grouping: allowed part load over the mean for machines and for the ranks of a
  // machine, and allowed expert count over (under) the mean, for memory.
  double node_imbalance = 0.05;
  double rank_imbalance = 0.10;
  double size_slack = 0.25;
  // Min-cut grouping: routing weight of a copy on another machine relative to the home copy's
  // 1, for tokens whose machine has no copy.
  double replica_weight = 1e-3;
  // Min-cut grouping: METIS starts per split (each refined; the lowest connectivity wins).
  int num_starts = 2;
  RankGrouping rank_grouping = RankGrouping::kLoad;
  // Min-cut grouping, kAffinity: passes of the connectivity search over the ranks of a machine (it
  // only shapes NVLink traffic there, and costs ranks_per_node times more per move); 0: METIS
  // alone.
  int rank_refine_passes = 0;
  // Min-cut grouping: also build the layer with the same machines and only the first
  // i * copies / copy_variants of its copies (in the order chosen), i = 0 .. copy_variants - 1:
  // candidates of the selection in place.h, without grouping again. Copies cost a weight read
  // each on their rank, so the model may prefer fewer.
  int copy_variants = 0;
  MachineGrouping machine_grouping = MachineGrouping::kNonUniform;
  // Ratios r tried for the controlled grouping of each machine's experts over its ranks.
  std::vector<double> r_grid = {0.0,  0.05, 0.1,  0.15, 0.2,  0.25, 0.3,  0.35, 0.4,  0.45, 0.5,
                                0.55, 0.6,  0.65, 0.7,  0.75, 0.8,  0.85, 0.9,  0.95, 1.0};
  // >= 0: use this r instead of the knee.
  double fixed_r = -1;
  // Replicate hot experts (step 5); false leaves one copy per expert.
  bool replication = true;
  // Step 5 at the machine level first (with `replication`): the fully non-uniform machine split
  // leaves one machine with most of the load, so its hot experts get copies on the other
  // machines (PlanMachineReplication). false: only the rank-level step of SPEC §8.
  bool machine_replication = true;
  // After grouping and replication, move and swap copies between the ranks of each machine to
  // even out the predicted rank loads (RebalanceRanks in rebalance.h). Machines keep their
  // experts, so cross-machine traffic does not change. false: ranks as grouped and replicated.
  bool rank_rebalance = true;
  // The routing the placement will be used with; the load prediction of the rebalancing step
  // follows it (Place sets it from the placement's routing).
  RoutingPolicy routing = RoutingPolicy::kTopology;
  // > 0: at most this many extra copies per layer (fewer hot experts, then fewer replicas);
  // for the min-cut grouping the number it makes (0: DefaultRedundantSlots, budget.h). No
  // copies at all: `replication` false.
  int max_extra_copies = 0;
  uint64_t seed = 1;
  int kmeans_restarts = 8;
};

// InvalidArgument unless every rank can hold an expert.
Status CheckExpertsCoverRanks(int num_experts, const Topology& topology);

// n_replica = min(max(1, floor(W_max / W_mean)), num_ranks - 1).
int ReplicaCount(double w_max, double w_mean, int num_ranks);

struct ReplicationPlan {
  int heaviest_rank = -1;              // -1: nothing replicated
  double rho = 0;                      // W_max / W_mean over ranks
  int num_replicas = 0;                // copies made of each hot expert
  std::vector<int> hot_experts;        // heaviest first
  std::vector<int> target_ranks;       // the least-loaded ranks, which receive the copies
  std::vector<double> predicted_load;  // W' per rank after replication
  // Per rank, (expert, predicted load it brings) after replication (PlanReplicationOnShares).
  std::vector<std::vector<std::pair<int, double>>> rank_shares;
};

// Step 5 on rank loads: `rank_experts[r]` are the experts of rank r, `expert_load[e]` their
// loads. Hot experts are the heaviest rank's experts, heaviest first, until they cover
// W_max * n / (1 + n); each is copied to the n least-loaded other ranks. Predicted loads:
// W'_max = W_max - W_r + W_r / (n + 1), W'_i = W_i + W_r / (n + 1) on the targets.
ReplicationPlan PlanReplication(const std::vector<std::vector<int>>& rank_experts,
                                const std::vector<double>& expert_load, int max_extra_copies);

// The same step on predicted loads: `rank_shares[r]` lists (expert, load it is predicted to
// bring to rank r) for every copy on r, e.g. after an earlier replication step. Hot experts are
// ranked by their share on the heaviest rank; a target rank that already holds a hot expert
// gets no second copy of it (and no share of its load).
ReplicationPlan PlanReplicationOnShares(
    const std::vector<std::vector<std::pair<int, double>>>& rank_shares, int max_extra_copies);

// Step 5 one level up (hierarchical replication): the groups are the machines. With machine
// loads W_m, rho = W_max / W_mean and n = ReplicaCount(W_max, W_mean, num_nodes); the heaviest
// machine's experts, heaviest first, until they cover W_max * n / (1 + n), each get one copy on
// each of the n least-loaded other machines. Within a target machine a copy goes to the rank
// with the lowest predicted load at that moment (hot experts in order, heaviest first), and each
// copy is predicted to take W_e / (n + 1) (topology-aware routing sends a machine's own tokens
// to its own copy). Predicted machine loads: W'_max = W_max - W_r + W_r / (n + 1),
// W'_t = W_t + W_r / (n + 1).
struct MachineReplicationPlan {
  int heaviest_node = -1;                   // -1: nothing replicated
  double rho = 0;                           // W_max / W_mean over machines
  int num_replicas = 0;                     // machines that receive a copy of each hot expert
  std::vector<int> hot_experts;             // heaviest first
  std::vector<int> target_nodes;            // the least-loaded machines
  std::vector<std::pair<int, int>> copies;  // (expert, rank) of every copy made
  std::vector<double> predicted_node_load;  // W' per machine
  // Per rank, (expert, predicted load it brings) for every copy, originals included.
  std::vector<std::vector<std::pair<int, double>>> rank_shares;
};
MachineReplicationPlan PlanMachineReplication(const Topology& topology,
                                              const std::vector<std::vector<int>>& rank_experts,
                                              const std::vector<double>& expert_load,
                                              int max_extra_copies);

// SPEC §8 step 6a: every replicated expert's copies get weights proportional to 1 / the
// predicted load of their rank, normalized to sum 1 (a rank predicted idle counts as weight 1
// before normalizing). Experts with one copy keep their weight.
void SetInverseLoadWeights(const std::vector<double>& rank_load, LayerPlacement* layer);

struct GraceMachineCurve {
  int node = 0;
  int num_experts = 0;
  std::vector<CurvePoint> curve;  // U(r), S(r) of the controlled grouping over the ranks
  int knee = 0;
};

// What GRACE decided for one layer, for --verbose and for tests.
struct GraceLayerReport {
  int layer_id = 0;
  std::vector<int> machine_sizes;       // experts per machine
  double machine_affinity_share = 1.0;  // U of the machine-level grouping
  GraceMachineCurve machine_curve;      // with MachineGrouping::kControlled
  std::vector<GraceMachineCurve> curves;
  MachineReplicationPlan machine_replication;
  ReplicationPlan replication;
  RebalanceReport rebalance;  // with GraceOptions::rank_rebalance
  // Min-cut grouping: profiled (token, machine) connectivity before and after the local search,
  // expected (token, machine) copies sent away before and after the traffic copies, and their
  // number.
  double node_connectivity_before = 0;
  double node_connectivity_after = 0;
  double cross_before_copies = 0;
  double cross_after_copies = 0;
  int traffic_copies = 0;
};

struct GraceLayerResult {
  LayerPlacement layer;
  GraceLayerReport report;
  // Min-cut grouping with GraceOptions::copy_variants: the same machines with fewer copies.
  std::vector<LayerPlacement> fewer_copies;
};

StatusOr<GraceLayerResult> PlaceGraceLayer(const LayerProfile& profile, const Topology& topology,
                                           const GraceOptions& options);

}  // namespace epserve::placement
