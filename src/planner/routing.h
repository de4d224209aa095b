// How routed tokens spread over EP ranks, which sets the GroupGEMM shapes (distinct experts a
// rank touches, rows per expert) and the dispatch/combine volume (distinct ranks per token).
// Expert loads come from uniform routing under the model's group limit (default) or a measured
// routing trace (the CSV format of ../shared/traces; docs/planner.md). Where the experts live
// (expert_layout.h): contiguously (rank r holds experts [r*g, (r+1)*g), g = experts / EP) by
// default; with R redundant slots, EPLB-style balanced copies; or a placement file's layout.
// Every rank is evaluated when the ranks differ, so the busiest rank (the max rank load, not the
// mean) sets the GroupGEMM time.
// Thread safety: immutable after construction; const methods may run concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "planner/expert_layout.h"
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
  std::vector<RankRouting> ranks;  // one entry standing for every rank when all are alike
  double mean_rows = 0;            // (token, expert) pairs per rank, averaged over the EP ranks
  // Rows (one per token and destination rank) the busiest rank sends or receives, split by
  // fabric: same machine (excluding itself) over NVLink, other machines over InfiniBand.
  double nvlink_rows = 0;
  double infiniband_rows = 0;
  double destinations_per_token = 0;  // expected distinct ranks a token is sent to
};

// Where the expert loads and the expert layout come from.
struct RoutingOptions {
  int ep = 1;
  int ranks_per_machine = 1;
  // Expert slots beyond one per expert (Deployment::redundant_experts). Without `placement` they
  // hold EPLB-style copies (BalancedLayout) of each layer's heaviest experts; 0: contiguous.
  int redundant_experts = 0;
  const RoutingTrace* trace = nullptr;         // nullptr: uniform group-limited routing
  const ExpertPlacement* placement = nullptr;  // nullptr: contiguous or balanced, as above
};

class RoutingModel {
 public:
  // One routing layer per trace layer (or per placed layer, or one for uniform routing). With a
  // placement and a trace, every trace layer must be placed (matched by layer id). Errors name
  // the EP, the slot counts and the file.
  static StatusOr<RoutingModel> Create(const ModelSpec& model, const RoutingOptions& options);
  // Uniform routing: each token picks topk_group of n_group groups, then top_k experts
  // uniformly among the kept groups' experts (plain uniform top-k when n_group == 1).
  // Contiguous experts.
  static StatusOr<RoutingModel> Uniform(const ModelSpec& model, int ep, int ranks_per_machine);
  // Per-expert selection probabilities and per-rank hit rates measured from `trace`.
  // Contiguous experts.
  static StatusOr<RoutingModel> FromTrace(const RoutingTrace& trace, const ModelSpec& model, int ep,
                                          int ranks_per_machine);

  int num_layers() const { return static_cast<int>(layers_.size()); }
  bool uniform() const { return uniform_; }  // expert loads from uniform routing (no trace)
  int ep() const { return ep_; }
  int redundant_experts() const { return redundant_experts_; }
  // Slots of the fullest rank in any layer (what its weight memory must hold).
  int MaxSlotsPerRank() const;
  // "contiguous", "balanced (EPLB-like)" or "placement <file>".
  const std::string& layout_source() const { return layout_source_; }
  const ExpertLayout& layout(int layer_idx) const { return layers_[layer_idx].layout; }
  // REQUIRES: 0 <= layer_idx < num_layers(). `total_tokens`: tokens entering the layer over all
  // DP groups; `tokens_per_rank`: tokens each rank dispatches.
  LayerRouting Evaluate(int layer_idx, double total_tokens, double tokens_per_rank) const;

 private:
  struct LayerStats {
    std::vector<double> expert_prob;  // P(a token selects expert e); sums to top_k
    std::vector<double> rank_hit;     // P(a token has at least one expert on rank r)
    ExpertLayout layout;
  };
  std::vector<LayerStats> layers_;
  int ep_ = 1;
  int ranks_per_machine_ = 1;
  int redundant_experts_ = 0;
  bool uniform_ = true;
  bool ranks_alike_ = true;  // uniform routing over contiguous experts: rank 0 stands for all
  std::string layout_source_ = "contiguous";
};

// P(a token sends to a given rank) under uniform group-limited routing, for ranks holding
// `experts_per_rank` contiguous experts. Exposed for tests.
double UniformRankHitProbability(const ModelSpec& model, int experts_per_rank, int rank_idx);
// The same for a rank holding any slots: a token selecting expert e goes to this copy with
// probability `share`, independently per expert (exact under group-limited uniform routing for
// ranks whose experts span at most 16 groups; beyond that, experts are taken as independent).
double UniformSlotsHitProbability(const ModelSpec& model, const std::vector<ExpertSlot>& slots);

}  // namespace epserve::planner
