// Efficiency factors: the fraction of a roof a kernel family reaches, plus fixed per-launch
// overheads. They live in JSON (data/planner/efficiency.json) so that `epserve plan calibrate`
// can refit them from measured kernel times; docs/planner.md says where each default comes from.
// Thread safety: plain values.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace epserve::planner {

// A roofline kernel: time = overhead + max(flops / (compute * peak), bytes / (memory * bw)).
struct KernelEfficiency {
  double compute = 1.0;  // fraction of peak FLOP/s reached when compute-bound, (0, 1]
  double memory = 1.0;   // fraction of HBM bandwidth reached when memory-bound, (0, 1]
  double overhead_us = 0;
  std::string source;  // where the value comes from (kept through calibration)
};

// A communication kernel: time = overhead + link latency + bytes / (efficiency * link bw).
struct CommEfficiency {
  double nvlink = 1.0;      // fraction of NVLink bandwidth reached (inside a machine)
  double infiniband = 1.0;  // fraction of InfiniBand bandwidth reached (across machines)
  double overhead_us = 0;
  std::string source;
};

// The kernel families the planner prices. Names match the JSON keys and the calibration CSV.
struct EfficiencyFactors {
  KernelEfficiency gemm;         // dense linear projections (qkv_a, q_b, o_proj, gate, shared)
  KernelEfficiency group_gemm;   // routed experts (DeepGEMM-style grouped GEMM)
  KernelEfficiency bmm;          // MLA absorb BMMs (per-head W_uk / W_uv)
  KernelEfficiency attention;    // MLA decode attention over the latent cache
  KernelEfficiency elementwise;  // norms, RoPE, activation, quantization (memory-bound)
  // Prefill's causal attention in MLA's expanded MHA form. Optional in the JSON: absent, it is a
  // copy of `attention` (no published prefill figure calibrates it).
  KernelEfficiency prefill_attention;
  CommEfficiency dispatch;
  CommEfficiency combine;
  CommEfficiency tp_collective;  // all-reduce / all-gather inside a DP group (NVLink)
  // KV cache from a prefill GPU to a decode GPU (disaggregated serving), over InfiniBand.
  // Optional in the JSON: absent, it is a copy of `dispatch` (no figure for bulk transfers).
  CommEfficiency kv_transfer;
  double step_overhead_us = 0;   // per decode step: sampling, scheduling, graph launch
  double memory_reserve_gb = 0;  // per GPU: activations, graphs, comm buffers, CUDA context
  std::string step_source;
  std::string memory_source;

  // Every fraction in (0, 1], every overhead >= 0; names the offending field.
  Status Validate() const;
};

StatusOr<EfficiencyFactors> EfficiencyFromJson(const nlohmann::json& json);
StatusOr<EfficiencyFactors> LoadEfficiencyFile(const std::string& path);
nlohmann::json EfficiencyToJson(const EfficiencyFactors& factors);

}  // namespace epserve::planner
