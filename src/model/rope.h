// RoPE tables with DeepSeek's YaRN scaling (HF DeepseekV3YarnRotaryEmbedding semantics):
// per position, interleaved (cos, sin) for each adjacent pair of a qk_rope_head_dim vector.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace epserve {

class RopeTable {
 public:
  explicit RopeTable(const ModelConfig& config);
  // Makes positions [0, n) available. Not thread-safe; call before parallel use.
  void EnsurePositions(int64_t n);
  // rope_dim floats: cos/sin interleaved for `pos`. REQUIRES: pos < positions ensured.
  const float* Row(int64_t pos) const { return table_.data() + pos * dim_; }
  const std::vector<double>& inv_freq() const { return inv_freq_; }
  double mscale() const { return mscale_; }

 private:
  int dim_;
  std::vector<double> inv_freq_;
  double mscale_ = 1.0;
  std::vector<float> table_;
};

}  // namespace epserve
