#include "runtime/routing_sketch.h"

#include <algorithm>
#include <cstring>

#include "base/timer.h"

namespace epserve {

RoutingSketch::RoutingSketch(std::vector<int> layer_ids, int top_k, int64_t capacity)
    : layer_ids_(std::move(layer_ids)),
      top_k_(top_k),
      capacity_(std::max<int64_t>(1, capacity)),
      sequence_(capacity_),
      position_(capacity_),
      experts_(capacity_ * layer_ids_.size() * top_k) {}

void RoutingSketch::Observe(const RouteEvent& ev) {
  const double t0 = NowSeconds();
  const int L = static_cast<int>(layer_ids_.size());
  const auto it = std::find(layer_ids_.begin(), layer_ids_.end(), ev.layer);
  if (it == layer_ids_.end() || ev.top_k != top_k_) return;
  const int li = static_cast<int>(it - layer_ids_.begin());
  const int64_t T = ev.num_tokens;
  const size_t row = static_cast<size_t>(L) * top_k_;  // one token's experts, all layers
  if (li == 0) pending_.assign(T * row, 0);
  if (pending_.size() != T * row) return;  // a pass that did not start at the first layer
  for (int64_t t = 0; t < T; ++t)
    for (int k = 0; k < top_k_; ++k)
      pending_[t * row + li * top_k_ + k] = static_cast<uint16_t>(ev.expert_ids[t * top_k_ + k]);
  if (li == L - 1) {
    for (int64_t t = 0; t < T; ++t) {
      sequence_[next_] = ev.sequence_ids ? ev.sequence_ids[t] : 0;
      position_[next_] = ev.positions ? static_cast<uint32_t>(ev.positions[t]) : 0;
      std::memcpy(&experts_[next_ * row], &pending_[t * row], row * sizeof(uint16_t));
      next_ = (next_ + 1) % capacity_;
      size_ = std::min(size_ + 1, capacity_);
    }
    observed_ += T;
    pending_.clear();
  }
  observe_seconds_ += NowSeconds() - t0;
}

std::string RoutingSketch::Serialize() const {
  const size_t row = layer_ids_.size() * top_k_;
  std::string s;
  s.reserve(8 + size_ * (8 + row * 2));
  auto put = [&s](const void* p, size_t n) { s.append(static_cast<const char*>(p), n); };
  put(&size_, 8);
  const int64_t first = (next_ - size_ + capacity_) % capacity_;
  for (int64_t i = 0; i < size_; ++i) {
    const int64_t j = (first + i) % capacity_;
    put(&sequence_[j], 4);
    put(&position_[j], 4);
    put(&experts_[j * row], row * 2);
  }
  return s;
}

Status RoutingSketch::AppendTo(std::string_view blob, uint32_t sequence_offset,
                               placement::Trace* trace) {
  const size_t row = static_cast<size_t>(trace->num_layers()) * trace->top_k();
  int64_t count = 0;
  if (blob.size() < 8)
    return Status::DataLoss("routing sketch: " + std::to_string(blob.size()) + " bytes");
  std::memcpy(&count, blob.data(), 8);
  const size_t per_token = 8 + row * 2;
  if (count < 0 || blob.size() != 8 + static_cast<size_t>(count) * per_token)
    return Status::DataLoss("routing sketch: " + std::to_string(blob.size()) + " bytes for " +
                            std::to_string(count) + " tokens of " + std::to_string(row) +
                            " experts");
  std::vector<uint16_t> experts(row);
  const char* p = blob.data() + 8;
  for (int64_t i = 0; i < count; ++i, p += per_token) {
    uint32_t seq, pos;
    std::memcpy(&seq, p, 4);
    std::memcpy(&pos, p + 4, 4);
    std::memcpy(experts.data(), p + 8, row * 2);
    RETURN_IF_ERROR(trace->AddToken(seq + sequence_offset, pos, experts.data(), nullptr));
  }
  return Status::Ok();
}

}  // namespace epserve
