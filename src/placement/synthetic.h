// Synthetic routing traces with planted co-activation clusters and skewed expert popularity,
// for benchmarks and tests of models whose real traces we do not have.
#pragma once

#include <cstdint>

#include "placement/trace.h"

namespace epserve::placement {

struct SyntheticTraceOptions {
  ModelShape shape;
  int num_layers = 1;  // MoE layers, numbered 1..num_layers
  int num_tokens = 4096;
  int num_sequences = 64;   // tokens are dealt to sequences in contiguous runs
  int num_clusters = 8;     // planted clusters per layer (random expert subsets of equal size)
  double in_cluster = 0.8;  // chance that each expert of a token comes from the token's cluster
  double skew = 1.0;        // Zipf exponent of expert popularity within a cluster
  uint64_t seed = 1;
};

// REQUIRES: options.shape.Validate().ok(), num_clusters divides num_experts, and each cluster
// holds at least top_k experts. Deterministic for a given seed.
Trace MakeSyntheticTrace(const SyntheticTraceOptions& options);

}  // namespace epserve::placement
