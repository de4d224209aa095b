#include "placement/synthetic.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

namespace epserve::placement {
namespace {

double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

int Draw(const std::vector<double>& cumulative, std::mt19937_64& rng) {
  const double u = Uniform(rng) * cumulative.back();
  return static_cast<int>(std::upper_bound(cumulative.begin(), cumulative.end(), u) -
                          cumulative.begin());
}

}  // namespace

Trace MakeSyntheticTrace(const SyntheticTraceOptions& options) {
  const ModelShape& shape = options.shape;
  const int n = shape.num_experts;
  const int k = shape.top_k;
  const int clusters = options.num_clusters;
  CHECK(clusters >= 1 && n % clusters == 0 && n / clusters >= k);
  const int cluster_size = n / clusters;
  std::vector<int> layer_ids(options.num_layers);
  std::iota(layer_ids.begin(), layer_ids.end(), 1);
  Trace trace(shape, layer_ids, GateWeights::kAbsent);
  std::mt19937_64 rng(options.seed);

  // Per layer: a random assignment of experts to clusters and Zipf popularity inside each.
  std::vector<std::vector<int>> members(options.num_layers);
  std::vector<double> zipf(cluster_size);
  for (int i = 0; i < cluster_size; ++i) {
    zipf[i] = (i ? zipf[i - 1] : 0.0) + 1.0 / std::pow(i + 1.0, options.skew);
  }
  std::vector<double> cluster_weight(clusters);
  for (int c = 0; c < clusters; ++c) {
    cluster_weight[c] = (c ? cluster_weight[c - 1] : 0.0) + 1.0 / std::sqrt(c + 1.0);
  }
  for (auto& m : members) {
    m.resize(n);
    std::iota(m.begin(), m.end(), 0);
    for (int i = n - 1; i > 0; --i) std::swap(m[i], m[static_cast<int>(Uniform(rng) * (i + 1))]);
  }

  std::vector<uint16_t> experts(static_cast<size_t>(options.num_layers) * k);
  const int per_sequence = std::max(1, options.num_tokens / std::max(1, options.num_sequences));
  for (int t = 0; t < options.num_tokens; ++t) {
    for (int l = 0; l < options.num_layers; ++l) {
      const int cluster = Draw(cluster_weight, rng);
      uint16_t* row = experts.data() + static_cast<size_t>(l) * k;
      for (int i = 0; i < k;) {
        int e;
        if (Uniform(rng) < options.in_cluster) {
          e = members[l][cluster * cluster_size + Draw(zipf, rng)];
        } else {
          e = static_cast<int>(Uniform(rng) * n);
        }
        if (std::find(row, row + i, e) == row + i) row[i++] = static_cast<uint16_t>(e);
      }
    }
    const auto seq = static_cast<uint32_t>(t / per_sequence);
    CHECK(
        trace.AddToken(seq, static_cast<uint32_t>(t % per_sequence), experts.data(), nullptr).ok());
  }
  return trace;
}

}  // namespace epserve::placement
