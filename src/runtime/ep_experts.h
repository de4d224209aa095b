// The expert-parallel ExpertBackend: routed experts live on many ranks (per an ExpertPlacement),
// tokens travel to them and back through comm::Dispatcher (SPEC §4):
//   Start:  pick the rank serving each (token, k) with the placement's Router, StartDispatch
//   Finish: FinishDispatch, run the local experts over expert-major packed rows (grouped GEMM),
//           weight and sum per received row, combine back, add into the output
// Also keeps the per-layer traffic and per-expert token counts that `--stats` prints.
#pragma once

#include <cstdint>
#include <vector>

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
  std::vector<int64_t> tokens_per_expert;  // by global expert id, computed here
};

struct EpTimes {
  double dispatch = 0, group_gemm = 0, combine = 0;
};

class EpExperts : public ExpertBackend {
 public:
  // All references must outlive this object. Layers not in the placement are errors.
  EpExperts(comm::Dispatcher& dispatcher, const placement::Placement& placement, const placement::Router& router,
            const ModelWeights& weights, ThreadPool& pool, int num_layers, int num_experts);

  Status Start(const RoutedBatch& batch) override;
  Status Finish(float* out) override;

  const std::vector<EpLayerStats>& layer_stats() const { return stats_; }
  const EpTimes& times() const { return times_; }

 private:
  comm::Dispatcher& dispatcher_;
  const placement::Placement& placement_;
  const placement::Router& router_;
  const ModelWeights& weights_;
  ThreadPool& pool_;
  int num_experts_;
  RoutedBatch batch_;
  std::vector<int32_t> dest_;
  comm::ReceivedRows received_;
  std::vector<float> packed_x_, packed_y_, combined_;
  MlpScratch scratch_;
  std::vector<EpLayerStats> stats_;
  EpTimes times_;
};

// Default placement: contiguous equal slices of every MoE layer's experts (the first
// n % ranks ranks get one more), topology-aware routing among copies.
placement::Placement ContiguousPlacement(const ModelConfig& config, int num_ranks, int ranks_per_node);

}  // namespace epserve
