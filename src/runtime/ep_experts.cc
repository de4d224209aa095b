#include "runtime/ep_experts.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "base/timer.h"
#include "kernels/ops.h"
#include "placement/place.h"

namespace epserve {

EpExperts::EpExperts(comm::Dispatcher& dispatcher, const placement::Placement& placement,
                     const placement::Router& router, const ExpertTable& experts, ThreadPool& pool,
                     int num_layers, int num_experts)
    : dispatcher_(dispatcher),
      placement_(&placement),
      router_(&router),
      table_(experts),
      pool_(pool),
      num_experts_(num_experts),
      stats_(num_layers) {
  for (auto& s : stats_) s.tokens_per_expert.assign(num_experts, 0);
}

Status EpExperts::Start(int slot, const RoutedBatch& b) {
  if (slot < 0 || slot >= kExpertSlots) return Status::Internal("expert slot out of range");
  const double t0 = NowSeconds();
  Slot& sl = slots_[slot];
  sl.batch = b;
  std::vector<int32_t>& dest = sl.dest;
  const int layer_idx = placement_->LayerIndex(b.layer);
  if (layer_idx < 0)
    return Status::InvalidArgument("placement has no entry for MoE layer " +
                                   std::to_string(b.layer));
  const int me = dispatcher_.rank();
  dest.resize(b.num_tokens * b.top_k);
  for (int64_t t = 0; t < b.num_tokens; ++t) {
    // The same token always picks the same copies, here and in `place evaluate`; its experts are
    // routed together (they share machines).
    const uint64_t key = b.token_keys
                             ? b.token_keys[t]
                             : (static_cast<uint64_t>(me) << 40) ^ static_cast<uint64_t>(t);
    router_->PickRanks(layer_idx, std::span<const int32_t>(b.expert_ids + t * b.top_k, b.top_k), me,
                       key, std::span<int>(dest.data() + t * b.top_k, b.top_k));
  }
  stats_[b.layer].tokens_sent += b.num_tokens;
  Status st = dispatcher_.StartDispatch({.num_tokens = b.num_tokens,
                                         .x = b.x,
                                         .expert_ids = b.expert_ids,
                                         .weights = b.weights,
                                         .dest_rank = dest.data()},
                                        &sl.handle);
  times_.dispatch += NowSeconds() - t0;
  return st;
}

Status EpExperts::Compute(int slot) {
  Slot& sl = slots_[slot];
  const RoutedBatch& b = sl.batch;
  const comm::ReceivedRows& rx = sl.received;
  double t0 = NowSeconds();
  RETURN_IF_ERROR(dispatcher_.FinishDispatch(&sl.handle, &sl.received));
  times_.dispatch += NowSeconds() - t0;
  t0 = NowSeconds();
  const int K = b.top_k, H = b.hidden;
  const int64_t R = rx.num_rows;
  const std::vector<MlpWeights>& experts = table_.RoutedExperts(b.layer);
  EpLayerStats& ls = stats_[b.layer];
  for (int64_t i = 0; i < R * K; ++i) {
    const int e = rx.expert_ids[i];
    if (e < 0) continue;
    if (e >= num_experts_ || experts[e].empty())
      return Status::Internal("rank " + std::to_string(dispatcher_.rank()) +
                              " received a token for expert " + std::to_string(e) + " of layer " +
                              std::to_string(b.layer) + ", which it does not hold");
    ls.tokens_per_expert[e]++;
  }
  ls.rows_received += rx.num_real_rows;
  const ExpertMajorLayout layout = LayoutExpertMajor(rx.expert_ids.data(), R * K, num_experts_);
  const int64_t pairs = layout.offsets[num_experts_];
  packed_x_.resize(pairs * H);
  packed_y_.resize(pairs * H);
  for (int64_t i = 0; i < R * K; ++i)
    if (layout.pair_row[i] >= 0)
      std::memcpy(&packed_x_[layout.pair_row[i] * H], &rx.x[(i / K) * H], H * sizeof(float));
  RETURN_IF_ERROR(RunGroupedExperts({.experts = &experts,
                                     .group_expert = layout.group_expert.data(),
                                     .offsets = layout.offsets.data(),
                                     .num_groups = num_experts_,
                                     .x = packed_x_.data(),
                                     .out = packed_y_.data(),
                                     .compute = b.compute},
                                    scratch_, pool_));
  // Expert outputs back in (row, slot) order; the origin weights and sums them.
  sl.combined.resize(pairs * H);
  int64_t j = 0;
  for (int64_t i = 0; i < R * K; ++i)
    if (layout.pair_row[i] >= 0)
      std::memcpy(&sl.combined[(j++) * H], &packed_y_[layout.pair_row[i] * H], H * sizeof(float));
  times_.group_gemm += NowSeconds() - t0;
  t0 = NowSeconds();
  Status st = dispatcher_.StartCombine(&sl.handle, sl.combined.data());
  times_.combine += NowSeconds() - t0;
  return st;
}

Status EpExperts::Finish(int slot, float* out) {
  Slot& sl = slots_[slot];
  const double t0 = NowSeconds();
  RETURN_IF_ERROR(dispatcher_.FinishCombine(&sl.handle, out));
  times_.combine += NowSeconds() - t0;
  EpLayerStats& ls = stats_[sl.batch.layer];
  auto add = [](comm::TrafficStats& a, const comm::TrafficStats& b) {
    a.rows_self += b.rows_self, a.rows_node += b.rows_node, a.rows_remote += b.rows_remote;
    a.bytes_self += b.bytes_self, a.bytes_node += b.bytes_node, a.bytes_remote += b.bytes_remote;
  };
  add(ls.dispatch, sl.handle.dispatch_stats());
  add(ls.combine, sl.handle.combine_stats());
  return Status::Ok();
}

Status EpExperts::Progress() {
  for (Slot& sl : slots_) RETURN_IF_ERROR(dispatcher_.Progress(&sl.handle));
  return Status::Ok();
}

StatusOr<int64_t> EpExperts::AgreeMax(int64_t value) {
  RETURN_IF_ERROR(dispatcher_.communicator().AllReduceMax(&value, 1));
  return value;
}

placement::ModelShape ModelShapeOf(const ModelConfig& c) {
  placement::ModelShape s;
  s.name = c.model_type;
  s.num_experts = c.n_routed_experts;
  s.top_k = c.num_experts_per_tok;
  s.hidden_size = c.hidden_size;
  s.moe_intermediate_size = c.moe_intermediate_size;
  s.num_hidden_layers = c.num_hidden_layers;
  s.num_expert_groups = std::max(1, c.n_group);
  return s;
}

placement::Placement ContiguousPlacement(const ModelConfig& c, int num_ranks, int ranks_per_node) {
  std::vector<int> moe_layers;
  for (int l = 0; l < c.num_hidden_layers; ++l)
    if (c.IsMoeLayer(l)) moe_layers.push_back(l);
  return ContiguousPlacement(ModelShapeOf(c), moe_layers, num_ranks, ranks_per_node);
}

placement::Placement ContiguousPlacement(const placement::ModelShape& shape,
                                         const std::vector<int>& moe_layers, int num_ranks,
                                         int ranks_per_node) {
  placement::Placement p;
  p.strategy = "contiguous";
  p.routing = placement::RoutingPolicy::kTopology;
  p.topology = {.num_nodes = num_ranks / ranks_per_node, .ranks_per_node = ranks_per_node};
  p.model = shape;
  for (int l : moe_layers)
    p.layers.push_back(placement::PlaceContiguousLayer(l, shape.num_experts, num_ranks));
  return p;
}

}  // namespace epserve
