#include "planner/roofline.h"

#include <algorithm>

namespace epserve::planner {
namespace {

KernelCost Roof(double flops, double bytes, double peak_flops, double bandwidth,
                const KernelEfficiency& eff) {
  KernelCost cost;
  cost.flops = flops;
  cost.bytes = bytes;
  const double compute_s = peak_flops > 0 ? flops / (eff.compute * peak_flops) : 0;
  const double memory_s = bytes / (eff.memory * bandwidth);
  cost.compute_bound = compute_s > memory_s;
  cost.time_us = eff.overhead_us + std::max(compute_s, memory_s) * 1e6;
  return cost;
}

}  // namespace

KernelCost MatmulCost(const HardwareSpec& hw, const KernelEfficiency& eff, const MatmulShape& s) {
  if (s.m <= 0 || s.groups <= 0 || s.k <= 0 || s.n <= 0) return {};
  const double flops = 2.0 * s.groups * s.m * s.k * s.n;
  const double bytes = s.groups * (s.m * s.k + s.n * s.k + s.m * s.n) * s.element_bytes;
  return Roof(flops, bytes, hw.PeakFlopsPerSecond(s.precision), hw.MemoryBytesPerSecond(), eff);
}

KernelCost AttentionCost(const HardwareSpec& hw, const KernelEfficiency& eff,
                         const AttentionShape& s) {
  if (s.requests <= 0 || s.heads <= 0) return {};
  const double queries = s.requests * s.query_len * s.heads;
  // Scores over [c_kv, k_pe] plus the weighted sum of c_kv, per query and cached token.
  const double flops = 2.0 * queries * s.kv_len * ((s.latent_dim + s.rope_dim) + s.latent_dim);
  const double cache_bytes =
      s.requests * s.kv_len * (s.latent_dim + s.rope_dim) * s.kv_element_bytes;
  const double io_bytes = queries * ((s.latent_dim + s.rope_dim) + s.latent_dim) * 2.0;
  return Roof(flops, cache_bytes + io_bytes, hw.PeakFlopsPerSecond(Precision::kBf16),
              hw.MemoryBytesPerSecond(), eff);
}

KernelCost PrefillAttentionCost(const HardwareSpec& hw, const KernelEfficiency& eff,
                                const PrefillAttentionShape& s) {
  double flops = 0;
  double bytes = 0;
  for (const PrefillSegment& seg : s.segments) {
    const double t = seg.tokens;
    const double p = seg.prefix;
    flops += 2.0 * s.heads * (s.qk_dim + s.v_dim) * (t * p + t * (t + 1) / 2);
    bytes += s.heads * (t + p + t) * (s.qk_dim + s.v_dim) * s.element_bytes;
  }
  if (flops <= 0 || s.heads <= 0) return {};
  return Roof(flops, bytes, hw.PeakFlopsPerSecond(Precision::kBf16), hw.MemoryBytesPerSecond(),
              eff);
}

KernelCost StreamCost(const HardwareSpec& hw, const KernelEfficiency& eff, double bytes) {
  if (bytes <= 0) return {};
  return Roof(0, bytes, 0, hw.MemoryBytesPerSecond(), eff);
}

KernelCost CommCost(const HardwareSpec& hw, const CommEfficiency& eff, const TransferBytes& bytes) {
  KernelCost cost;
  if (bytes.nvlink <= 0 && bytes.infiniband <= 0) return cost;
  cost.bytes = bytes.nvlink + bytes.infiniband;
  double wire_s = 0;
  if (bytes.nvlink > 0) {
    wire_s = std::max(wire_s, hw.nvlink_latency_us * 1e-6 +
                                  bytes.nvlink / (eff.nvlink * hw.NvlinkBytesPerSecond()));
  }
  if (bytes.infiniband > 0) {
    wire_s =
        std::max(wire_s, hw.infiniband_latency_us * 1e-6 +
                             bytes.infiniband / (eff.infiniband * hw.InfinibandBytesPerSecond()));
  }
  cost.time_us = eff.overhead_us + wire_s * 1e6;
  return cost;
}

double Intensity(const KernelCost& cost) { return cost.bytes > 0 ? cost.flops / cost.bytes : 0; }

double AchievedTflops(const KernelCost& cost) {
  return cost.time_us > 0 ? cost.flops / (cost.time_us * 1e-6) / 1e12 : 0;
}

}  // namespace epserve::planner
