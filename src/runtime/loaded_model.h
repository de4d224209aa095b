// A checkpoint opened, its config parsed and its weights validated and bound: everything a
// rank needs before it can build a Model. Owns the memory mappings the weights point into.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "io/checkpoint.h"
#include "model/config.h"
#include "model/weights.h"

namespace epserve {

struct LoadedModel {
  std::unique_ptr<Checkpoint> checkpoint;
  ModelConfig config;
  std::unique_ptr<ModelWeights> weights;
};

StatusOr<std::unique_ptr<LoadedModel>> LoadModel(const std::string& dir, const LoadOptions& options);

// The load's log line: the checkpoint's tensor bytes and what of the MTP module was loaded, e.g.
// "weights: 18.1 MB in /m; not loaded: the MTP module (model.layers.4.*, 4.9 MB; --mtp off)".
std::string DescribeLoad(const LoadedModel& model, const std::string& dir);

// The embedded default model: the `tiny` preset (BF16), generated on first use into
// $EPSERVE_CACHE_DIR, else $XDG_CACHE_HOME/epserve, else $HOME/.cache/epserve. Returns its dir.
StatusOr<std::string> EnsureDefaultModel();

// Any preset, generated on first use into the same cache folder ("<preset>-<bf16|fp8>").
// `progress` (may be null) is told of shards written.
StatusOr<std::string> EnsurePresetModel(const std::string& preset, bool fp8, int num_shards,
                                        const std::function<void(int, int)>& progress);

}  // namespace epserve
