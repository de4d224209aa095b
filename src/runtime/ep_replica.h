// One rank's share of an expert-parallel deployment (SPEC §3): EP = DP x TP. Ranks form DP
// groups of TP consecutive ranks (never spanning machines); every rank is an EP rank holding
// the routed experts the placement gives it (and loading only those). BuildEpReplica checks the
// layout, reads the config and placement, loads this rank's weights (every rank agreeing that
// every rank loaded) and wires the model to the dispatcher, the EP experts and its TP group.
// `epserve generate` under mpirun (runtime/ep_runner.h) and `epserve engine` (the serving
// world) both start from it.
//
// Either model family (runtime/model_family.h): DeepSeek-V2/V3 fills `config`, `loaded` and
// `model`; DeepSeek-V4 fills `v4_weights` and `v4_model` (every layer is a MoE layer and is
// placed; every rank maps all experts' FP4 views, which are never read unless routed here, so
// no selective loading; attention is replicated on the TP ranks, only MoE tokens split:
// v4::V4Model::SetTensorParallel). V4 refuses MTP and --requant.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "comm/communicator.h"
#include "comm/dispatch.h"
#include "model/model.h"
#include "model/v4/v4_model.h"
#include "model/v4/v4_weights.h"
#include "placement/placement.h"
#include "placement/router.h"
#include "runtime/ep_experts.h"
#include "runtime/loaded_model.h"
#include "runtime/model_family.h"

namespace epserve {

struct EpReplicaOptions {
  std::string model_dir;
  int tp = 1;
  int ranks_per_node = 0;  // 0: machines as MPI reports them
  comm::A2aMode a2a = comm::A2aMode::kSparse;
  std::string placement_path;  // empty: contiguous equal slices
  int threads = 0;             // 0: cores / ranks on this machine
  LoadOptions::Memory weights = LoadOptions::Memory::kCopied;
  LoadOptions::Requant requant = LoadOptions::Requant::kNone;
  int fail_load_rank = -1;  // fault injection for tests: this rank reports a load failure
  // Place and load the MTP module's routed experts too (EngineOptions::mtp). A placement file
  // without the module's layer gets it in contiguous slices.
  bool mtp = false;
};

struct EpReplica {
  ModelFamily family = ModelFamily::kDeepSeekV3;
  ModelConfig config;        // DeepSeek-V2/V3 only
  std::vector<int> node_of;  // machine of every rank
  int num_ranks = 1, rank = 0, num_nodes = 1, ranks_per_node = 1;
  int tp = 1, dp = 1, group = 0;  // this rank's DP group
  bool leader() const { return rank % tp == 0; }
  std::unique_ptr<placement::Placement> plan;
  std::unique_ptr<placement::Router> router;
  std::unique_ptr<LoadedModel> loaded;             // DeepSeek-V2/V3 only
  std::unique_ptr<v4::V4Weights> v4_weights;       // DeepSeek-V4 only
  std::unique_ptr<ExpertTable> expert_table;       // DeepSeek-V2/V3: over loaded->weights
  std::unique_ptr<comm::Communicator> group_comm;  // this group's TP ranks
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<comm::Dispatcher> dispatcher;
  std::unique_ptr<EpExperts> experts;
  std::unique_ptr<Model> model;           // DeepSeek-V2/V3
  std::unique_ptr<v4::V4Model> v4_model;  // DeepSeek-V4
  // The family's forward pass, as the engine takes it.
  ForwardPass& forward() const {
    if (model) return *model;
    return *v4_model;
  }
};

// Errors that every rank detects alike (bad options, a rank's load failure) come back on every
// rank with the same message; `is_global` tells the caller that only rank 0 need print it.
struct EpError {
  Status status;
  bool is_global = false;
};

EpError BuildEpReplica(comm::MpiWorld& mpi, const EpReplicaOptions& options,
                       std::unique_ptr<EpReplica>* out);

}  // namespace epserve
