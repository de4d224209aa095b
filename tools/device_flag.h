// --device cpu|cuda[:N] of `generate`, `serve`, `engine` and `bench decode`: where the model's
// forward pass runs. With cuda the weights are uploaded to the GPU in their own formats (progress
// and GB/s printed), the cache pool is allocated in its memory (--kv-memory: bytes, or a share of
// the GPU's free memory after the weights), and the engine runs its plans there
// (Model::SetBackend); scheduling, the prefix cache, sampling and serving stay on the host.
// A build without nvcc refuses cuda with a clear message.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "base/status.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/loaded_model.h"

namespace epserve::tools {

struct DeviceFlag {
  std::string device = "cpu";
  CLI::Option* AddTo(CLI::App* cmd);
  bool cuda() const { return device != "cpu"; }
};

// The GPU index of a --device value "cuda" (0) or "cuda:N"; anything else is an error naming
// the value.
StatusOr<int> ParseDeviceIndex(const std::string& device);

// What a model needs on its device (weights, the forward backend, the cache storage); owns
// them. Must outlive the Model and the Engine it was attached to.
class DeviceParts {
 public:
  virtual ~DeviceParts() = default;
};

struct AttachOptions {
  std::string device;  // the --device value
  // The --kv-memory value, a share of the GPU's free memory with "%"; empty keeps
  // EngineOptions::num_blocks.
  std::string kv_memory;
  // The flags the GPU backend does not run yet; each non-default one is refused by name.
  bool mtp = false;
  bool compute_fast = false;
  bool requant = false;
};

// For "cpu": null, nothing changes. For "cuda[:N]": uploads the model, sets `model`'s backend,
// sizes eo->num_blocks from kv_memory and points eo->kv_storage at device memory. Errors name
// the GPU and what did not fit.
StatusOr<std::unique_ptr<DeviceParts>> AttachDevice(const AttachOptions& options,
                                                    const LoadedModel& loaded, Model* model,
                                                    EngineOptions* eo);

}  // namespace epserve::tools
