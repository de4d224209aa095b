#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace epserve {

namespace {
double CorrectionDim(double num_rotations, int dim, double base, int max_pos) {
  return (dim * std::log(max_pos / (num_rotations * 2.0 * M_PI))) / (2.0 * std::log(base));
}
}  // namespace

RopeTable::RopeTable(const ModelConfig& c) : dim_(c.qk_rope_head_dim) {
  const int half = dim_ / 2;
  inv_freq_.resize(half);
  for (int i = 0; i < half; ++i) inv_freq_[i] = 1.0 / std::pow(c.rope_theta, (2.0 * i) / dim_);
  if (c.rope_scaling.enabled) {
    const YarnScaling& y = c.rope_scaling;
    double low = std::floor(CorrectionDim(y.beta_fast, dim_, c.rope_theta, y.original_max_position_embeddings));
    double high = std::ceil(CorrectionDim(y.beta_slow, dim_, c.rope_theta, y.original_max_position_embeddings));
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim_ - 1));
    if (low == high) high += 0.001;
    for (int i = 0; i < half; ++i) {
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double extrapolation = 1.0 - ramp;  // 1: keep the original frequency
      const double extra = inv_freq_[i], inter = inv_freq_[i] / y.factor;
      inv_freq_[i] = inter * (1.0 - extrapolation) + extra * extrapolation;
    }
    mscale_ = YarnMscale(y.factor, y.mscale) / YarnMscale(y.factor, y.mscale_all_dim);
  }
}

void RopeTable::EnsurePositions(int64_t n) {
  const int64_t have = static_cast<int64_t>(table_.size()) / dim_;
  if (n <= have) return;
  table_.resize(n * dim_);
  for (int64_t p = have; p < n; ++p)
    for (int i = 0; i < dim_ / 2; ++i) {
      const double angle = static_cast<double>(p) * inv_freq_[i];
      table_[p * dim_ + 2 * i] = static_cast<float>(std::cos(angle) * mscale_);
      table_[p * dim_ + 2 * i + 1] = static_cast<float>(std::sin(angle) * mscale_);
    }
}

}  // namespace epserve
