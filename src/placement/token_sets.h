// The profile's tokens of one MoE layer as the hypergraph the placement objective lives on:
// every distinct top-k expert set (sorted) with the number of tokens that chose it, and for
// every expert the sets that contain it. A token's cross-machine cost is the number of
// machines its set spans beyond its own (the (lambda - 1) connectivity of its hyperedge), so
// minimising traffic is minimising the count-weighted connectivity of these sets.
// A value type; const methods are safe to share between threads.
#pragma once

#include <cstdint>
#include <vector>

#include "placement/trace.h"

namespace epserve::placement {

class TokenSets {
 public:
  // The distinct expert sets of layer `layer_idx` (an index into trace.layer_ids()).
  static TokenSets FromTrace(const Trace& trace, int layer_idx);
  // From explicit sets of `k` experts each (`experts` holds num_sets * k ids); for tests.
  static TokenSets FromSets(int num_experts, int k, const std::vector<uint16_t>& experts,
                            const std::vector<double>& count);

  int num_experts() const { return num_experts_; }
  int k() const { return k_; }
  int num_sets() const { return static_cast<int>(count_.size()); }
  // The k experts of set `s`, ascending.
  const uint16_t* Set(int s) const { return experts_.data() + static_cast<size_t>(s) * k_; }
  double count(int s) const { return count_[s]; }
  // The sets holding expert `e`.
  const std::vector<int>& SetsOf(int e) const { return sets_of_[e]; }
  double total_count() const { return total_; }

 private:
  void Index();

  int num_experts_ = 0;
  int k_ = 0;
  std::vector<uint16_t> experts_;
  std::vector<double> count_;
  std::vector<std::vector<int>> sets_of_;
  double total_ = 0;
};

}  // namespace epserve::placement
