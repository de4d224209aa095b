// A routing trace: for every token and every MoE layer, the experts the gate chose (and their
// weights where known), together with the shape of the model that produced it. The on-disk form
// is described in docs/trace-format.md; this is the in-memory form the placement code reads.
//
// Storage is layer-major (all tokens of one layer are contiguous) because every placement step
// works one layer at a time. Thread safety: a value type; const methods are safe to share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace epserve::placement {

// What the placement code needs to know about the model behind a trace.
struct ModelShape {
  std::string name;               // informative only, e.g. "deepseek-v2-lite-chat"
  int num_experts = 0;            // routed experts per MoE layer
  int top_k = 0;                  // experts chosen per token
  int hidden_size = 0;            // bytes sent per token copy = hidden_size * activation bytes
  int moe_intermediate_size = 0;  // expert FFN width, for the compute model
  int num_hidden_layers = 0;      // all decoder layers, dense ones included (0 = unknown)
  int num_expert_groups = 1;      // the gate's expert groups (DeepSeek-V3: 8); EPLB packs them

  Status Validate() const;
};

// DeepSeek-V2-Lite(-Chat): the model of the shared traces.
ModelShape DeepSeekV2LiteShape();

// Whether a trace carries the gate weights of the chosen experts.
enum class GateWeights { kAbsent, kRecorded };

class Trace {
 public:
  // Makes an empty trace for `layer_ids` (the model's layer numbers of the recorded MoE layers,
  // strictly increasing). REQUIRES: shape.Validate().ok().
  Trace(ModelShape shape, std::vector<int> layer_ids, GateWeights weights);

  const ModelShape& shape() const { return shape_; }
  const std::vector<int>& layer_ids() const { return layer_ids_; }
  int num_layers() const { return static_cast<int>(layer_ids_.size()); }
  int64_t num_tokens() const { return static_cast<int64_t>(sequence_.size()); }
  int top_k() const { return shape_.top_k; }
  bool has_weights() const { return has_weights_; }
  GateWeights gate_weights() const {
    return has_weights_ ? GateWeights::kRecorded : GateWeights::kAbsent;
  }

  // Appends one token. `experts` and `weights` hold num_layers() * top_k values, layer-major
  // (layer 0's k experts, then layer 1's, ...); `weights` is ignored without has_weights().
  // Returns InvalidArgument for an expert id out of range or a repeated expert in one layer.
  Status AddToken(uint32_t sequence_id, uint32_t position, const uint16_t* experts,
                  const float* weights);

  // The top_k experts of `token` in layer `layer_idx` (an index into layer_ids(), not an id).
  const uint16_t* Experts(int layer_idx, int64_t token) const {
    return experts_[layer_idx].data() + token * shape_.top_k;
  }
  // Their gate weights. REQUIRES: has_weights().
  const float* Weights(int layer_idx, int64_t token) const {
    return weights_[layer_idx].data() + token * shape_.top_k;
  }
  uint32_t sequence_id(int64_t token) const { return sequence_[token]; }
  uint32_t position(int64_t token) const { return position_[token]; }

  // Distinct sequence ids in order of first appearance.
  std::vector<uint32_t> SequenceOrder() const;

  // Returns the layer index of model layer `layer_id`, or -1.
  int LayerIndex(int layer_id) const;

 private:
  ModelShape shape_;
  std::vector<int> layer_ids_;
  bool has_weights_;
  std::vector<uint32_t> sequence_;
  std::vector<uint32_t> position_;
  std::vector<std::vector<uint16_t>> experts_;  // [layer][token * top_k + k]
  std::vector<std::vector<float>> weights_;     // same layout; empty without weights
};

// The two parts of a trace split by whole sequences.
struct TraceSplit {
  Trace profile;  // the first sequences, to place from
  Trace holdout;  // the remaining sequences, to evaluate on
};

// Splits by sequence order of first appearance: the first round(fraction * num_sequences)
// sequences go to `profile`. Returns InvalidArgument unless 0 < fraction < 1 and both parts
// get at least one sequence.
StatusOr<TraceSplit> SplitTrace(const Trace& trace, double train_fraction);

}  // namespace epserve::placement
