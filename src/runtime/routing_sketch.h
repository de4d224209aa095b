// What online re-placement profiles from (runtime/online_placer.h): the routing of the last
// `capacity` tokens this rank's group computed, every MoE layer's top-k experts per token, in a
// ring. A bounded sample of live traffic that keeps the co-activation GRACE places by (which
// experts one token needs together, in every layer), at capacity * layers * top_k * 2 bytes
// (DeepSeek-V3, 8,192 tokens: 58 x 8 x 2 = 928 B a token, 7.6 MB) and one small copy per token
// and layer per step. Serialize / AppendTo carry it to the rank that places.
// Thread safety: one thread (the model's) observes; Serialize from the same thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/model.h"
#include "placement/trace.h"

namespace epserve {

class RoutingSketch {
 public:
  // `layer_ids`: the MoE layers to record (the main model's; strictly increasing).
  RoutingSketch(std::vector<int> layer_ids, int top_k, int64_t capacity);

  // Feed every MoE layer's RouteEvent of a forward pass; a token enters the ring once its last
  // recorded layer is seen. Events of other layers (the MTP module's) are ignored.
  void Observe(const RouteEvent& event);

  int64_t size() const { return size_; }                       // tokens held (<= capacity)
  int64_t observed() const { return observed_; }               // tokens seen since the start
  double observe_seconds() const { return observe_seconds_; }  // time spent in Observe

  // The tokens held, oldest first: int64 count, then per token uint32 sequence id, uint32
  // position and layers * top_k uint16 experts.
  std::string Serialize() const;
  // Appends a serialized sketch's tokens to `trace` (its layers and top_k must be the sketch's),
  // their sequence ids offset by `sequence_offset` (sketches of different groups must not share
  // sequences). DataLoss for a malformed blob.
  static Status AppendTo(std::string_view blob, uint32_t sequence_offset, placement::Trace* trace);

 private:
  std::vector<int> layer_ids_;
  int top_k_;
  int64_t capacity_;
  int64_t next_ = 0, size_ = 0, observed_ = 0;
  std::vector<uint32_t> sequence_, position_;  // [capacity]
  std::vector<uint16_t> experts_;              // [capacity, layers, top_k]
  std::vector<uint16_t> pending_;              // [tokens, layers, top_k] of the current pass
  double observe_seconds_ = 0;
};

}  // namespace epserve
