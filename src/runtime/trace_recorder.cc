#include "runtime/trace_recorder.h"

#include <algorithm>

#include "runtime/ep_experts.h"

namespace epserve {

StatusOr<std::unique_ptr<TraceRecorder>> TraceRecorder::Open(const std::string& path,
                                                             const ModelConfig& c) {
  std::vector<int> layers;
  for (int l = 0; l < c.num_hidden_layers; ++l)
    if (c.IsMoeLayer(l)) layers.push_back(l);
  ASSIGN_OR_RETURN(auto writer, placement::TraceWriter::Open(path, ModelShapeOf(c), layers,
                                                             placement::GateWeights::kRecorded));
  return std::unique_ptr<TraceRecorder>(
      new TraceRecorder(std::move(writer), layers, c.num_experts_per_tok));
}

void TraceRecorder::Observe(const RouteEvent& ev) {
  if (!status_.ok()) return;
  const int L = static_cast<int>(layers_.size());
  const int li =
      static_cast<int>(std::find(layers_.begin(), layers_.end(), ev.layer) - layers_.begin());
  if (li == L) return;
  if (li == 0) {
    experts_.assign(ev.num_tokens * L * top_k_, 0);
    weights_.assign(experts_.size(), 0.0f);
  }
  for (int64_t t = 0; t < ev.num_tokens; ++t)
    for (int k = 0; k < top_k_; ++k) {
      experts_[(t * L + li) * top_k_ + k] = static_cast<uint16_t>(ev.expert_ids[t * top_k_ + k]);
      weights_[(t * L + li) * top_k_ + k] = ev.weights[t * top_k_ + k];
    }
  if (li != L - 1) return;
  for (int64_t t = 0; t < ev.num_tokens && status_.ok(); ++t)
    status_ = writer_.Append(ev.sequence_ids[t], static_cast<uint32_t>(ev.positions[t]),
                             &experts_[t * L * top_k_], &weights_[t * L * top_k_]);
}

Status TraceRecorder::Close() {
  RETURN_IF_ERROR(status_);
  return writer_.Close();
}

}  // namespace epserve
