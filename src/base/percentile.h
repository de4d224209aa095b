// Percentiles of benchmark samples (runtime/engine_bench, runtime/mtp_bench).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace epserve {

// The p-quantile (p in [0, 1]) of v, linearly interpolated between the two nearest ranks
// (p = 0.5 of an even count: the mean of the middle two); 0 when v is empty.
inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(idx), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

}  // namespace epserve
