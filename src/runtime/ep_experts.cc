#include "runtime/ep_experts.h"

#include <chrono>
#include <cstring>

#include "kernels/ops.h"
#include "placement/place.h"

namespace epserve {

namespace {
double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

EpExperts::EpExperts(comm::Dispatcher& dispatcher, const placement::Placement& placement,
                     const placement::Router& router, const ModelWeights& weights, ThreadPool& pool, int num_layers,
                     int num_experts)
    : dispatcher_(dispatcher),
      placement_(placement),
      router_(router),
      weights_(weights),
      pool_(pool),
      num_experts_(num_experts),
      stats_(num_layers) {
  for (auto& s : stats_) s.tokens_per_expert.assign(num_experts, 0);
}

Status EpExperts::Start(const RoutedBatch& b) {
  const double t0 = Now();
  batch_ = b;
  const int layer_idx = placement_.LayerIndex(b.layer);
  if (layer_idx < 0) return Status::InvalidArgument("placement has no entry for MoE layer " + std::to_string(b.layer));
  const int me = dispatcher_.rank();
  dest_.resize(b.num_tokens * b.top_k);
  for (int64_t t = 0; t < b.num_tokens; ++t)
    for (int k = 0; k < b.top_k; ++k) {
      const int e = b.expert_ids[t * b.top_k + k];
      // The same token always picks the same copy, here and in `place evaluate`.
      const uint64_t key = b.token_keys ? b.token_keys[t] : (static_cast<uint64_t>(me) << 40) ^ static_cast<uint64_t>(t);
      dest_[t * b.top_k + k] = router_.PickRank(layer_idx, e, me, key);
    }
  Status st = dispatcher_.StartDispatch({.num_tokens = b.num_tokens, .x = b.x, .expert_ids = b.expert_ids,
                                         .weights = b.weights, .dest_rank = dest_.data()});
  times_.dispatch += Now() - t0;
  return st;
}

Status EpExperts::Finish(float* out) {
  double t0 = Now();
  RETURN_IF_ERROR(dispatcher_.FinishDispatch(&received_));
  times_.dispatch += Now() - t0;
  t0 = Now();
  const int K = batch_.top_k, H = batch_.hidden;
  const int64_t R = received_.num_rows;
  const auto& experts = weights_.layers[batch_.layer].moe->experts;
  EpLayerStats& ls = stats_[batch_.layer];
  // Expert-major packing of (row, slot) pairs.
  std::vector<int64_t> offsets(num_experts_ + 1, 0);
  for (int64_t i = 0; i < R * K; ++i) {
    const int e = received_.expert_ids[i];
    if (e < 0) continue;
    if (e >= num_experts_ || experts[e].empty())
      return Status::Internal("rank " + std::to_string(dispatcher_.rank()) + " received a token for expert " +
                              std::to_string(e) + " of layer " + std::to_string(batch_.layer) + ", which it does not hold");
    offsets[e + 1]++;
    ls.tokens_per_expert[e]++;
  }
  for (int64_t r = 0; r < R; ++r)
    for (int k = 0; k < K; ++k)
      if (received_.expert_ids[r * K + k] >= 0) {
        ls.rows_received++;
        break;
      }
  for (int e = 0; e < num_experts_; ++e) offsets[e + 1] += offsets[e];
  const int64_t pairs = offsets[num_experts_];
  std::vector<int64_t> fill(offsets.begin(), offsets.end() - 1), pair_row(R * K, -1);
  packed_x_.resize(pairs * H);
  packed_y_.resize(pairs * H);
  for (int64_t i = 0; i < R * K; ++i) {
    const int e = received_.expert_ids[i];
    if (e < 0) continue;
    const int64_t row = fill[e]++;
    pair_row[i] = row;
    std::memcpy(&packed_x_[row * H], &received_.x[(i / K) * H], H * sizeof(float));
  }
  std::vector<int32_t> ids(num_experts_);
  for (int e = 0; e < num_experts_; ++e) ids[e] = e;
  RETURN_IF_ERROR(RunGroupedExperts({.experts = &experts, .group_expert = ids.data(), .offsets = offsets.data(),
                                     .num_groups = num_experts_, .x = packed_x_.data(), .out = packed_y_.data()},
                                    scratch_, pool_));
  // Expert outputs back in (row, slot) order; the origin weights and sums them.
  combined_.resize(pairs * H);
  int64_t j = 0;
  for (int64_t i = 0; i < R * K; ++i)
    if (pair_row[i] >= 0) std::memcpy(&combined_[(j++) * H], &packed_y_[pair_row[i] * H], H * sizeof(float));
  times_.group_gemm += Now() - t0;
  t0 = Now();
  RETURN_IF_ERROR(dispatcher_.StartCombine(combined_.data()));
  RETURN_IF_ERROR(dispatcher_.FinishCombine(out));
  times_.combine += Now() - t0;
  auto add = [](comm::TrafficStats& a, const comm::TrafficStats& b) {
    a.rows_self += b.rows_self, a.rows_node += b.rows_node, a.rows_remote += b.rows_remote;
    a.bytes_self += b.bytes_self, a.bytes_node += b.bytes_node, a.bytes_remote += b.bytes_remote;
  };
  add(ls.dispatch, dispatcher_.dispatch_stats());
  add(ls.combine, dispatcher_.combine_stats());
  return Status::Ok();
}

placement::Placement ContiguousPlacement(const ContiguousPlacementOptions& o) {
  placement::Placement p;
  p.strategy = "contiguous";
  p.routing = placement::RoutingPolicy::kTopology;
  p.topology = {.num_nodes = o.num_ranks / o.ranks_per_node, .ranks_per_node = o.ranks_per_node};
  p.model.num_experts = o.num_experts;
  p.model.top_k = o.top_k;
  p.model.hidden_size = o.hidden_size;
  p.model.moe_intermediate_size = o.moe_intermediate_size;
  p.model.num_hidden_layers = o.num_layers;
  for (int l = o.first_moe_layer; l < o.num_layers; ++l)
    p.layers.push_back(placement::PlaceContiguousLayer(l, o.num_experts, o.num_ranks));
  return p;
}

}  // namespace epserve
