// The expert-parallel ExpertBackend: routed experts live on many ranks (per an ExpertPlacement),
// tokens travel to them and back through comm::Dispatcher (SPEC §4):
//   Start:   pick the rank serving each (token, k) with the placement's Router, StartDispatch
//   Compute: FinishDispatch, run the local experts over expert-major packed rows (grouped
//            GEMM), StartCombine with the outputs in received (row, slot) order
//   Finish:  FinishCombine: the origin weights, sums and adds into the output
// Each slot has its own comm::DispatchHandle, so two micro-batches' exchanges can be in flight.
// Also keeps the per-layer traffic and per-expert token counts that `--stats` prints.
#pragma once

#include <cstdint>
#include <vector>

#include "base/aligned_vector.h"
#include "base/thread_pool.h"
#include "comm/dispatch.h"
#include "model/config.h"
#include "model/experts.h"
#include "placement/placement.h"
#include "placement/router.h"

namespace epserve {

struct EpLayerStats {
  comm::TrafficStats dispatch, combine;
  int64_t rows_received = 0;
  int64_t tokens_sent = 0;  // tokens this rank dispatched (each once, whatever its copies)
  std::vector<int64_t> tokens_per_expert;  // by global expert id, computed here
};

struct EpTimes {
  double dispatch = 0, group_gemm = 0, combine = 0;
};

class EpExperts : public ExpertBackend {
 public:
  // All references must outlive this object. Layers not in the placement are errors. `experts`
  // is any family's table (ModelExpertTable for V2/V3, v4::V4Weights), read at every Compute, so
  // experts bound after the load (online re-placement) are seen.
  EpExperts(comm::Dispatcher& dispatcher, const placement::Placement& placement,
            const placement::Router& router, const ExpertTable& experts, ThreadPool& pool,
            int num_layers, int num_experts);

  Status Start(int slot, const RoutedBatch& batch) override;
  Status Compute(int slot) override;
  Status Finish(int slot, float* out) override;
  Status Progress() override;
  bool HasTransfers() const override { return true; }
  // An AllReduceMax over the dispatcher's communicator.
  StatusOr<int64_t> AgreeMax(int64_t value) override;

  const std::vector<EpLayerStats>& layer_stats() const { return stats_; }
  const EpTimes& times() const { return times_; }

  // Online re-placement: from the next Start on, tokens go where `placement` and `router` say
  // (both must outlive their use, and the weights must hold this rank's experts of it). Between
  // steps only.
  void SetPlacement(const placement::Placement& placement, const placement::Router& router) {
    placement_ = &placement;
    router_ = &router;
  }

 private:
  comm::Dispatcher& dispatcher_;
  const placement::Placement* placement_;
  const placement::Router* router_;
  const ExpertTable& table_;
  ThreadPool& pool_;
  int num_experts_;
  struct Slot {
    RoutedBatch batch;
    std::vector<int32_t> dest;
    comm::DispatchHandle handle;
    comm::ReceivedRows received;
    std::vector<float> combined;
  };
  Slot slots_[kExpertSlots];
  // Expert-major rows, vector-aligned like LocalExperts' (the kernels then read them in place).
  AlignedVector<float> packed_x_, packed_y_;
  MlpScratch scratch_;
  std::vector<EpLayerStats> stats_;
  EpTimes times_;
};

// The placement-side shape of `config`'s routed experts (named after its model_type; expert
// groups at least 1).
placement::ModelShape ModelShapeOf(const ModelConfig& config);

// Default placement: contiguous equal slices of every MoE layer's experts (the first
// n % ranks ranks get one more), topology-aware routing among copies.
placement::Placement ContiguousPlacement(const ModelConfig& config, int num_ranks,
                                         int ranks_per_node);
// The same over any family's shape: every layer in `moe_layers` gets contiguous slices.
placement::Placement ContiguousPlacement(const placement::ModelShape& shape,
                                         const std::vector<int>& moe_layers, int num_ranks,
                                         int ranks_per_node);

}  // namespace epserve
