// How routed tokens spread over EP ranks, which sets the GroupGEMM shapes (distinct experts a
// rank touches, rows per expert) and the dispatch/combine volume (distinct ranks per token).
// Two sources: uniform routing under the model's group limit (default), or a measured routing
// trace (the CSV format of ../shared/traces; docs/planner.md).
// Experts are placed contiguously: rank r holds experts [r*g, (r+1)*g), g = experts / EP.
// Thread safety: immutable after construction; const methods may run concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "planner/model_spec.h"

namespace epserve::planner {

// Routing decisions of a model over some tokens: for each MoE layer, top_k expert ids per token.
struct RoutingTrace {
  std::vector<int> layer_ids;                     // as in the file, ascending
  std::vector<std::vector<uint16_t>> selections;  // per layer, token-major, top_k ids per token
  int top_k = 0;
  int num_experts = 0;  // 1 + the largest id seen
  int64_t NumTokens(size_t layer_idx) const {
    return static_cast<int64_t>(selections[layer_idx].size()) / top_k;
  }
};

// Parses the trace CSV (`Layer ID,Batch Number,Token,Activated Expert IDs`, header first).
StatusOr<RoutingTrace> ParseRoutingTraceCsv(const std::string& text, const std::string& origin);
// Loads one CSV file, or every *.csv file in a directory (tokens concatenated per layer).
StatusOr<RoutingTrace> LoadRoutingTrace(const std::string& path);

// Expected load of one EP rank in one MoE layer.
struct RankRouting {
  double touched_experts = 0;  // distinct local experts with at least one row
  double rows = 0;             // (token, local expert) pairs
};

// Expected routing of one MoE layer for a given number of tokens.
struct LayerRouting {
  std::vector<RankRouting> ranks;  // uniform routing: one entry standing for every rank
  // Rows (one per token and destination rank) the busiest rank sends or receives, split by
  // fabric: same machine (excluding itself) over NVLink, other machines over InfiniBand.
  double nvlink_rows = 0;
  double infiniband_rows = 0;
  double destinations_per_token = 0;  // expected distinct ranks a token is sent to
};

class RoutingModel {
 public:
  // Uniform routing: each token picks topk_group of n_group groups, then top_k experts
  // uniformly among the kept groups' experts (plain uniform top-k when n_group == 1).
  static StatusOr<RoutingModel> Uniform(const ModelSpec& model, int ep, int ranks_per_machine);
  // Per-expert selection probabilities and per-rank hit rates measured from `trace`.
  static StatusOr<RoutingModel> FromTrace(const RoutingTrace& trace, const ModelSpec& model, int ep,
                                          int ranks_per_machine);

  int num_layers() const { return static_cast<int>(layers_.size()); }
  bool uniform() const { return uniform_; }
  int ep() const { return ep_; }
  // REQUIRES: 0 <= layer_idx < num_layers(). `total_tokens`: tokens entering the layer over all
  // DP groups; `tokens_per_rank`: tokens each rank dispatches.
  LayerRouting Evaluate(int layer_idx, double total_tokens, double tokens_per_rank) const;

 private:
  struct LayerStats {
    std::vector<double> expert_prob;  // P(a token selects expert e); sums to top_k
    std::vector<double> rank_hit;     // P(a token has at least one expert on rank r)
  };
  std::vector<LayerStats> layers_;
  int ep_ = 1;
  int ranks_per_machine_ = 1;
  int experts_per_rank_ = 1;
  bool uniform_ = true;
};

// P(a token sends to a given rank) under uniform group-limited routing, for ranks holding
// `experts_per_rank` contiguous experts. Exposed for tests.
double UniformRankHitProbability(const ModelSpec& model, int experts_per_rank, int rank_idx);

}  // namespace epserve::planner
