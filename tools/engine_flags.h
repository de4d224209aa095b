// The engine flags `epserve serve` and `epserve engine` share (batching, cache pool, threads),
// and the one-process engine both build when no mpirun world is involved.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model.h"
#include "model/v4/v4_model.h"
#include "model/v4/v4_weights.h"
#include "runtime/engine.h"
#include "runtime/loaded_model.h"
#include "tools/device_flag.h"
#include "tools/overlap_flag.h"

namespace epserve::tools {

struct EngineFlags {
  int64_t max_batch_tokens = 256;
  int max_running = 64;
  int64_t block_size = 64;
  std::string kv_dtype = "f32";
  std::string kv_memory = "10%";
  int threads = 0;
  std::string mtp = "off";
  std::string compute = "exact";
  std::string requant = "none";
  OverlapFlags overlap;
  DeviceFlag device;
  int64_t grammar_cache_mb = 256;  // grammar::kDefaultGrammarCacheBytes

  void AddTo(CLI::App* cmd);
  // The settings that hold for the whole process (the grammar cache's bound); Options calls it,
  // a process that compiles grammars without an engine (serve --np) calls it itself.
  void ApplyProcessWide() const;
  // Checks the flags; num_blocks from --kv-memory for this model, overlap for a deployment of
  // ep ranks in DP groups of tp, ranks_per_machine to a machine.
  // With --overlap auto the planner's choice goes to *overlap_note.
  StatusOr<EngineOptions> Options(const std::string& model_dir, const ModelConfig& config,
                                  int ep = 1, int tp = 1, int ranks_per_machine = 1,
                                  std::string* overlap_note = nullptr) const;
  // The same for a model already built, of any family (model/forward_pass.h): its own option
  // checks and cache layout; eos_ids are the default stop ids.
  StatusOr<EngineOptions> OptionsFor(const std::string& model_dir, const ForwardPass& model,
                                     const std::vector<int32_t>& eos_ids, int ep = 1, int tp = 1,
                                     int ranks_per_machine = 1,
                                     std::string* overlap_note = nullptr) const;
  // The flags again, for a child `epserve engine` command line.
  std::vector<std::string> Args() const;

 private:
  // What every family shares: the limits, the cache dtype, overlap, stop ids, constraints.
  StatusOr<EngineOptions> Common(const std::string& model_dir, const std::vector<int32_t>& eos_ids,
                                 int ep, int tp, int ranks_per_machine,
                                 std::string* overlap_note) const;
};

// A whole model in this process (no expert parallelism).
struct LocalEngine {
  std::unique_ptr<LoadedModel> loaded;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<DeviceParts> device;  // --device cuda: weights, backend, cache on the GPU
  std::unique_ptr<Model> model;
  std::unique_ptr<LocalExperts> experts;
  // DeepSeek-V4 (runtime/model_family.h) instead of loaded/model/experts.
  std::unique_ptr<v4::V4Weights> v4_weights;
  std::unique_ptr<v4::V4Model> v4_model;
  std::unique_ptr<Engine> engine;
};
StatusOr<std::unique_ptr<LocalEngine>> StartLocalEngine(const std::string& model_dir,
                                                        const EngineFlags& flags);

}  // namespace epserve::tools
