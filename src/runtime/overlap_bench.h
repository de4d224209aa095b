// `epserve bench moe-layer --overlap ...` (under mpirun): decode passes of a real checkpoint with
// every rank an EP rank holding `batch` requests at `kv_len` cached positions, timed under each
// overlap mode (none, dispatch, microbatch) in the same run, modes alternating within each
// repeat. Reports per batch and mode the pass time and the MoE layers' share of it per layer
// (Model's StepTimes::moe_layers over the number of MoE layers), each the slowest rank's, median
// over repeats, and the exchange bytes that crossed machines. What the planner predicts for the
// same deployment is `epserve plan layer` (scripts/overlap_bench.sh puts both side by side).
#pragma once

#include <vector>

#include "base/status.h"
#include "comm/communicator.h"
#include "model/model.h"

namespace epserve {

struct OverlapBenchOptions {
  std::string model_dir;
  std::vector<int> batches = {1, 2, 4, 8, 16, 32, 64, 128};  // requests (tokens) per rank
  std::vector<Overlap> modes = {Overlap::kNone, Overlap::kDispatch, Overlap::kMicroBatch};
  int repeats = 5;
  int kv_len = 256;        // cached positions of every request
  int ranks_per_node = 0;  // 0: as MPI reports
  int threads = 1;
};

struct OverlapBenchRow {
  int batch = 0;
  Overlap mode = Overlap::kDispatch;
  double pass_ms = 0;                 // one decode pass (all layers and the head)
  double moe_layer_ms = 0;            // the MoE layers' wall time per MoE layer
  double remote_bytes_per_layer = 0;  // dispatch + combine bytes across machines, all ranks
};

// Collective: every rank calls it; rows are valid on rank 0, in batch then mode order.
StatusOr<std::vector<OverlapBenchRow>> RunOverlapBench(comm::MpiWorld& world,
                                                       const OverlapBenchOptions& options);

}  // namespace epserve
