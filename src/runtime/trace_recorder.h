// --trace-out: records the engine's own routing decisions (every token, every MoE layer, its
// top-k experts and gate weights) in the project's trace format (docs/trace-format.md), so
// `epserve place` can place experts from real traffic.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/config.h"
#include "model/model.h"
#include "placement/trace_io.h"

namespace epserve {

class TraceRecorder {
 public:
  static StatusOr<std::unique_ptr<TraceRecorder>> Open(const std::string& path, const ModelConfig& config);
  // Feed every MoE layer's RouteEvent; tokens are appended once the last MoE layer of a step is
  // seen. The first write error is kept and returned by Close.
  void Observe(const RouteEvent& event);
  Status Close();

 private:
  TraceRecorder(placement::TraceWriter writer, std::vector<int> layers, int top_k)
      : writer_(std::move(writer)), layers_(std::move(layers)), top_k_(top_k) {}
  placement::TraceWriter writer_;
  std::vector<int> layers_;  // MoE layer ids
  int top_k_;
  std::vector<uint16_t> experts_;  // [tokens, layers, top_k] of the current step
  std::vector<float> weights_;
  Status status_;
};

}  // namespace epserve
