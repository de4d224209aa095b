// Expert-parallel generation under mpirun (SPEC §3): EP = DP x TP. Ranks form DP groups of TP
// consecutive ranks (never spanning machines); every rank is an EP rank holding the routed
// experts the placement gives it (and loading only those). Requests are dealt round-robin to
// the DP groups, so groups run different loads, including none; each group runs an Engine
// (continuous batching, paged cache) in lock-step with the others (runtime/generator.h).
// Results and statistics are gathered on rank 0.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "comm/communicator.h"
#include "comm/dispatch.h"
#include "runtime/ep_replica.h"
#include "runtime/generator.h"
#include "runtime/online_placer.h"

namespace epserve {

struct EpRunOptions {
  std::string model_dir;
  std::vector<GenerateRequest> requests;  // all requests; request i goes to group i % DP
  EngineOptions engine;                   // num_blocks 0: sized by kv_memory_bytes
  int64_t kv_memory_bytes = 0;            // 0: enough for every request of the group at once
  bool keep_logits = false;
  int tp = 1;
  int ranks_per_node = 0;  // 0: machines as MPI reports them
  comm::A2aMode a2a = comm::A2aMode::kSparse;
  std::string placement_path;                                  // empty: contiguous equal slices
  int threads = 0;                                             // 0: cores / ranks on this machine
  LoadOptions::Memory weights = LoadOptions::Memory::kCopied;  // where a rank's weights live
  LoadOptions::Requant requant = LoadOptions::Requant::kNone;
  // Fault injection for tests: rank `kill_rank` kills itself (SIGKILL) before step `kill_step`,
  // or, with `stop_instead`, stops itself (SIGSTOP: a stuck peer, which only the other ranks'
  // deadlines can notice).
  int kill_rank = -1, kill_step = -1;
  bool stop_instead = false;
  // Fault injection for tests: rank `fail_load_rank` reports a load failure.
  int fail_load_rank = -1;
  // Online re-placement (runtime/online_placer.h); off unless set. Its load options follow
  // `weights` and `requant`.
  std::optional<OnlinePlacerOptions> online;
};

struct EpRunResult {                    // filled on rank 0 only
  std::vector<RequestResult> requests;  // in the order given (logits [tokens, vocab] when kept)
  int vocab = 0;
  int num_ranks = 0, tp = 1, dp = 1, num_nodes = 1;
  std::vector<int> group_batch;                         // requests per DP group
  int64_t cache_blocks = 0, block_size = 0;             // group 0's pool
  double prefill_seconds = 0, decode_seconds = 0;       // max over ranks
  int64_t prefill_tokens = 0, decode_tokens = 0;        // all groups
  int64_t draft_tokens = 0, accepted_draft_tokens = 0;  // MTP, all groups
  int64_t split_forwards = 0, forwards = 0;  // rank 0's main passes, and those micro-batched
  std::string stats_table;                   // the --stats report
  std::string placer_report;                 // with `online`: OnlinePlacer::FormatReports
  std::vector<ReplacementReport> replacements;
};

EpError RunEpGenerate(comm::MpiWorld& world, const EpRunOptions& options, EpRunResult* result);

}  // namespace epserve
