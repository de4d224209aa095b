#include "placement/trace.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>
#include <utility>

namespace epserve::placement {

Status ModelShape::Validate() const {
  if (num_experts < 1 || num_experts > 65535) {
    return Status::InvalidArgument("num_experts must be in [1, 65535], got " +
                                   std::to_string(num_experts));
  }
  if (top_k < 1 || top_k > num_experts) {
    return Status::InvalidArgument("top_k must be in [1, num_experts], got " +
                                   std::to_string(top_k));
  }
  if (hidden_size < 0 || moe_intermediate_size < 0 || num_hidden_layers < 0) {
    return Status::InvalidArgument(
        "hidden_size, moe_intermediate_size and num_hidden_layers "
        "must not be negative");
  }
  // Layer ids are at most 1000000 (trace and placement files); the SGLang export allocates a
  // row per decoder layer.
  if (num_hidden_layers > 1000001) {
    return Status::InvalidArgument("num_hidden_layers must be at most 1000001, got " +
                                   std::to_string(num_hidden_layers));
  }
  if (num_expert_groups < 1 || num_experts % num_expert_groups != 0) {
    return Status::InvalidArgument("num_expert_groups must divide num_experts, got " +
                                   std::to_string(num_expert_groups));
  }
  return Status::Ok();
}

ModelShape DeepSeekV2LiteShape() {
  return ModelShape{.name = "deepseek-v2-lite-chat",
                    .num_experts = 64,
                    .top_k = 6,
                    .hidden_size = 2048,
                    .moe_intermediate_size = 1408,
                    .num_hidden_layers = 27,
                    .num_expert_groups = 1};
}

Trace::Trace(ModelShape shape, std::vector<int> layer_ids, GateWeights weights)
    : shape_(std::move(shape)),
      layer_ids_(std::move(layer_ids)),
      has_weights_(weights == GateWeights::kRecorded),
      experts_(layer_ids_.size()),
      weights_(has_weights_ ? layer_ids_.size() : 0) {
  CHECK(shape_.Validate().ok()) << shape_.Validate().message();
  for (size_t i = 1; i < layer_ids_.size(); ++i) {
    CHECK(layer_ids_[i] > layer_ids_[i - 1]) << "layer ids must increase";
  }
}

Status Trace::AddToken(uint32_t sequence_id, uint32_t position, const uint16_t* experts,
                       const float* weights) {
  const int k = shape_.top_k;
  for (int l = 0; l < num_layers(); ++l) {
    const uint16_t* row = experts + static_cast<size_t>(l) * k;
    for (int i = 0; i < k; ++i) {
      if (row[i] >= shape_.num_experts) {
        return Status::InvalidArgument("expert id " + std::to_string(row[i]) + " in layer " +
                                       std::to_string(layer_ids_[l]) + " is not below " +
                                       std::to_string(shape_.num_experts));
      }
      for (int j = 0; j < i; ++j) {
        if (row[j] == row[i]) {
          return Status::InvalidArgument("expert " + std::to_string(row[i]) +
                                         " chosen twice in layer " + std::to_string(layer_ids_[l]));
        }
      }
    }
  }
  for (int l = 0; l < num_layers(); ++l) {
    const size_t off = static_cast<size_t>(l) * k;
    experts_[l].insert(experts_[l].end(), experts + off, experts + off + k);
    if (has_weights_) weights_[l].insert(weights_[l].end(), weights + off, weights + off + k);
  }
  sequence_.push_back(sequence_id);
  position_.push_back(position);
  return Status::Ok();
}

std::vector<uint32_t> Trace::SequenceOrder() const {
  std::vector<uint32_t> order;
  std::unordered_set<uint32_t> seen;
  for (uint32_t s : sequence_) {
    if (seen.insert(s).second) order.push_back(s);
  }
  return order;
}

int Trace::LayerIndex(int layer_id) const {
  for (int i = 0; i < num_layers(); ++i) {
    if (layer_ids_[i] == layer_id) return i;
  }
  return -1;
}

StatusOr<TraceSplit> SplitTrace(const Trace& trace, double train_fraction) {
  if (!(train_fraction > 0.0 && train_fraction < 1.0)) {
    return Status::InvalidArgument("train fraction must be in (0, 1), got " +
                                   std::to_string(train_fraction));
  }
  const std::vector<uint32_t> order = trace.SequenceOrder();
  const auto num_profile =
      static_cast<size_t>(std::llround(train_fraction * static_cast<double>(order.size())));
  if (num_profile == 0 || num_profile >= order.size()) {
    return Status::InvalidArgument("train fraction " + std::to_string(train_fraction) +
                                   " leaves one part of the " + std::to_string(order.size()) +
                                   " sequences empty");
  }
  std::unordered_set<uint32_t> profile_ids(order.begin(), order.begin() + num_profile);
  TraceSplit split{Trace(trace.shape(), trace.layer_ids(), trace.gate_weights()),
                   Trace(trace.shape(), trace.layer_ids(), trace.gate_weights())};
  const int k = trace.top_k();
  const int num_layers = trace.num_layers();
  std::vector<uint16_t> experts(static_cast<size_t>(num_layers) * k);
  std::vector<float> weights(trace.has_weights() ? experts.size() : 0);
  for (int64_t t = 0; t < trace.num_tokens(); ++t) {
    for (int l = 0; l < num_layers; ++l) {
      const uint16_t* e = trace.Experts(l, t);
      std::copy(e, e + k, experts.begin() + static_cast<size_t>(l) * k);
      if (trace.has_weights()) {
        const float* w = trace.Weights(l, t);
        std::copy(w, w + k, weights.begin() + static_cast<size_t>(l) * k);
      }
    }
    Trace& part = profile_ids.count(trace.sequence_id(t)) ? split.profile : split.holdout;
    RETURN_IF_ERROR(part.AddToken(trace.sequence_id(t), trace.position(t), experts.data(),
                                  weights.empty() ? nullptr : weights.data()));
  }
  return split;
}

}  // namespace epserve::placement
