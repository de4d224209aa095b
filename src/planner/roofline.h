// Roofline cost of the kernel kinds the planner prices (SPEC §6):
//   time = overhead + max(flops / (compute_eff * peak), bytes / (memory_eff * bandwidth)).
// GroupGEMM over g groups of [m,k]x[k,n]: flops 2*g*m*k*n, bytes g*(m*k + n*k + m*n) elements;
// a GEMM is the case g = 1. Communication: overhead + latency + bytes / (eff * link bandwidth),
// with the NVLink and InfiniBand parts running in parallel.
// Pure functions of their arguments; thread-safe.
#pragma once

#include <vector>

#include "planner/efficiency.h"
#include "planner/hardware.h"

namespace epserve::planner {

struct KernelCost {
  double flops = 0;
  double bytes = 0;  // memory traffic (or bytes on the wire for communication)
  double time_us = 0;
  bool compute_bound = false;
};

struct MatmulShape {
  double groups = 1;  // g; fractional when it is an expectation (distinct experts touched)
  double m = 0;       // rows (tokens) per group
  double k = 0;
  double n = 0;
  double element_bytes = 1;  // bytes per element of inputs, weights and outputs (1 = FP8)
  Precision precision = Precision::kFp8;
};
// Zero cost (no launch) when m or groups is 0.
KernelCost MatmulCost(const HardwareSpec& hw, const KernelEfficiency& eff, const MatmulShape& s);

// MLA decode attention in the absorbed form over the latent cache (SPEC §2): every query token of
// every head scores kv_len cached [c_kv, k_pe] vectors and sums kv_len c_kv vectors (BF16).
struct AttentionShape {
  double requests = 0;
  double query_len = 1;
  double kv_len = 0;
  double heads = 0;       // heads on this rank (num_attention_heads / TP)
  double latent_dim = 0;  // kv_lora_rank
  double rope_dim = 0;    // qk_rope_head_dim
  double kv_element_bytes = 2;
};
KernelCost AttentionCost(const HardwareSpec& hw, const KernelEfficiency& eff,
                         const AttentionShape& s);

// A chunk of one prompt prefilled in a pass: `tokens` new tokens after `prefix` cached ones.
struct PrefillSegment {
  double tokens = 0;
  double prefix = 0;
};

// Causal prefill attention in MLA's expanded (MHA) form (SPEC §2): each query of a segment
// scores the `prefix` cached tokens and the segment's tokens up to itself over qk_dim
// (nope + rope) per head, and sums as many v_dim values; one launch for all segments, BF16.
//   flops = sum 2 * heads * (qk_dim + v_dim) * (t*p + t*(t+1)/2)
//   bytes = sum heads * (t + p + t) * (qk_dim + v_dim) * element_bytes  (Q and O, then K and V)
struct PrefillAttentionShape {
  std::vector<PrefillSegment> segments;
  double heads = 0;  // heads on this rank (num_attention_heads / TP)
  double qk_dim = 0;
  double v_dim = 0;
  double element_bytes = 2;
};
KernelCost PrefillAttentionCost(const HardwareSpec& hw, const KernelEfficiency& eff,
                                const PrefillAttentionShape& s);

// A memory-bound streaming kernel (norms, RoPE, activation, quantization) moving `bytes`.
KernelCost StreamCost(const HardwareSpec& hw, const KernelEfficiency& eff, double bytes);

// Bytes one rank moves per direction over each fabric.
struct TransferBytes {
  double nvlink = 0;
  double infiniband = 0;
};
// Zero cost when nothing moves.
KernelCost CommCost(const HardwareSpec& hw, const CommEfficiency& eff, const TransferBytes& bytes);

// Arithmetic intensity (FLOP per byte) and achieved TFLOP/s of a priced kernel (for rooflines).
double Intensity(const KernelCost& cost);
double AchievedTflops(const KernelCost& cost);

}  // namespace epserve::planner
