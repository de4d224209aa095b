// Replays a trace through a placement and its routing policy and measures what the expert
// all-to-all would cost: where token copies go, how even the ranks' expert work is, and a
// modeled MoE-layer time.
//
// Where tokens start: every sequence of the trace lives on one rank (data-parallel attention),
// sequence i (in order of first appearance) on rank i mod R. Each rank works through its
// sequences' tokens in steps of `step_tokens_per_rank`; a step of a layer is one all-to-all.
//
// Counting, per layer and token: the distinct ranks its top-k experts are routed to, each
// counted once as kept on the token's rank, sent within its machine, or sent across machines;
// and the distinct machines, each counted once as its own or another (what a hierarchical
// all-to-all pays across machines: one copy per token and destination machine).
//
// Modeled time of one step of one layer (docs/placement-results.md):
//   expert work: slowest rank's sum over its experts of max(tokens * flops / FLOP/s,
//                weight bytes / HBM bandwidth) (a roofline per expert)
//   + 2 (dispatch and combine) * slowest machine's max(sent, received) cross-machine bytes
//                                / (ranks_per_node * per-rank NIC bandwidth)
//   + 2 * slowest rank's max(sent, received) NVLink bytes / NVLink bandwidth, where NVLink
//     carries copies between ranks of one machine and the forwarding of each cross-machine
//     copy from its arrival rank (the sender's peer with the same local index) to the
//     destination ranks of that machine.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "base/status.h"
#include "placement/placement.h"
#include "placement/trace.h"

namespace epserve::placement {

// Hardware constants of the cost model. Defaults: an A100 cluster like the one GRACE-MoE was
// measured on (DGX A100: one 200 Gb/s HDR NIC per GPU, NVLink 3).
struct CostModel {
  double expert_tflops = 150;        // achieved dense BF16 TFLOP/s of the expert GEMMs
  double hbm_gbytes_per_s = 2000;    // for reading an expert's weights once per step
  double ib_gbytes_per_s = 25;       // per rank (one NIC each)
  double nvlink_gbytes_per_s = 150;  // per rank, achieved in all-to-all
  int activation_bytes = 2;          // per hidden element sent (BF16)
  int weight_bytes = 2;              // per expert weight element (BF16)

  Status Validate() const;
};

struct EvaluateOptions {
  CostModel cost;
  int step_tokens_per_rank = 1024;
  // Unset: the placement's own policy.
  std::optional<RoutingPolicy> routing;
  int num_threads = 1;
  std::function<void(int done, int total)> progress;  // layers; from the calling thread
  // 0: sequence i (in order of first appearance) starts on rank i mod R, as the header says.
  // Otherwise the sequences are shuffled by this seed first: another deal of the same prompts
  // to the ranks (the selection in place.h averages over several).
  uint64_t deal_seed = 0;
};

struct TrafficCounts {
  int64_t rank_local = 0;     // (token, rank) pairs: kept on the token's own rank
  int64_t rank_intra = 0;     //   sent to another rank of the same machine
  int64_t rank_cross = 0;     //   sent to a rank of another machine
  int64_t machine_local = 0;  // (token, machine) pairs: the token's own machine
  int64_t machine_cross = 0;  //   another machine
  double cross_bytes = 0;     // machine_cross * hidden_size * activation_bytes (dispatch only)
  double nvlink_bytes = 0;    // NVLink copies (direct and forwarded) * the same (dispatch only)

  void Add(const TrafficCounts& other);
};

struct LoadStats {
  double max = 0;  // token-expert pairs on the busiest rank, over the whole trace
  double mean = 0;
  double stddev = 0;
  double idle_fraction = 0;  // 1 - mean / max: share of rank time spent waiting
  double max_over_mean() const { return mean > 0 ? max / mean : 0; }
};

struct LayerEvaluation {
  int layer_id = 0;
  int extra_copies = 0;
  TrafficCounts traffic;
  LoadStats load;
  // Mean over steps, microseconds.
  double time_us = 0;
  double compute_us = 0;
  double ib_us = 0;
  double nvlink_us = 0;
  // Mean over steps of the slowest rank's token-expert pairs over the mean (step imbalance).
  double step_max_over_mean = 0;
};

struct Evaluation {
  std::vector<LayerEvaluation> layers;
  // Traffic and extra copies summed over layers; load statistics, times and step imbalance
  // averaged over layers (so time_us is the mean modeled time of one MoE layer per step).
  LayerEvaluation total;
  int64_t num_tokens = 0;
  int num_steps = 0;
};

// Whether `placement` was made for `trace`: the same routed experts per layer and top-k, and
// every MoE layer the trace records placed (extra placed layers are fine). The message names the
// first layer that differs and how, e.g. "layer 3 of the trace is not in the placement (it places
// layers 1-2)"; the caller puts the file name in front. `place evaluate` refuses what fails.
Status CheckPlacementFitsTrace(const Placement& placement, const Trace& trace);

// Evaluates every layer the placement and the trace share. Returns InvalidArgument when the
// trace's model does not match the placement's (experts, top-k) or they share no layer.
StatusOr<Evaluation> Evaluate(const Placement& placement, const Trace& trace,
                              const EvaluateOptions& options);

}  // namespace epserve::placement
