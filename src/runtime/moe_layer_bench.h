// `epserve bench moe-layer` (under mpirun): one MoE layer of a real checkpoint, every rank an EP
// rank with its own tokens, run through dispatch -> local experts -> combine with the sparse
// exchange and with the padded baseline in the same run. Reports bytes on the wire and time
// (max over ranks, median of repeats) and their ratios, for a sweep of tokens per rank and a
// skewed case (rank 0 with many tokens, the others with one).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "comm/communicator.h"

namespace epserve {

struct MoeLayerBenchOptions {
  std::string model_dir;
  std::vector<int> batches = {1, 2, 4, 8, 16, 32, 64, 128};
  int skewed_batch = 128;
  int repeats = 5;
  int ranks_per_node = 0;  // 0: as MPI reports
  int threads = 1;
};

struct MoeLayerBenchRow {
  std::string label;       // "batch 8" or "skewed 128/1"
  int tokens_rank0 = 0, tokens_other = 0;
  double sparse_bytes = 0, padded_bytes = 0;      // dispatch + combine, all ranks
  double sparse_remote_bytes = 0, padded_remote_bytes = 0;
  double sparse_ms = 0, padded_ms = 0;            // median over repeats of the slowest rank
};

// Collective: every rank calls it; rows are valid on rank 0.
StatusOr<std::vector<MoeLayerBenchRow>> RunMoeLayerBench(comm::MpiWorld& world, const MoeLayerBenchOptions& options);

}  // namespace epserve
