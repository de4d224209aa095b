// The small numerical pieces of DeepSeek-V4's forward pass (docs/v4-model.md §3, §5, §6), as
// plain functions on pointers so tests can hold each against a scalar statement:
//   - Q8Block / Q4Block: the model's own FP8 (per 64) and FP4 (per 32) simulations, UE8M0 scales;
//   - RopeFreqs / RotateInterleaved: RoPE on interleaved pairs (YaRN for compressed layers);
//   - Sinkhorn: the hyper-connections' pre / post / comb from the mixing logits;
//   - PoolGroup: one compressor entry's per-channel softmax pooling.
// None allocates except RopeFreqs (returns its table); all are deterministic.
#pragma once

#include <cstdint>
#include <vector>

#include "model/v4/v4_config.h"

namespace epserve::v4 {

// 2^ceil(log2 x) for x > 0, exactly.
double Pow2Ceil(double x);

// In place, per consecutive block of `block` values of x[0, n): amax = max(max|v|, 1e-4),
// s = 2^ceil(log2(amax / 448)), v <- e4m3(clamp(v / s, -448, 448)) * s (nearest even).
// REQUIRES: n % block == 0.
void Q8Block(float* x, int64_t n, int64_t block);

// The nearest FP4 e2m1 value of |v| <= 6 (ties to the even mantissa), sign kept.
float E2m1Round(float v);
// In place, per block of 32: amax = max(max|v|, 6 * 2^-126), s = 2^ceil(log2(amax / 6)),
// v <- e2m1(clamp(v / s, -6, 6)) * s. REQUIRES: n % 32 == 0.
void Q4Block(float* x, int64_t n);

// RoPE frequencies f_i, i < rope_dim / 2, of a layer kind: compressed (ratio != 0) layers use
// compress_rope_theta with YaRN (when rope_scaling gives an original length), ratio-0 layers
// rope_theta without.
std::vector<double> RopeFreqs(const V4Config& c, bool compressed);

// Rotates pairs (x[2i], x[2i+1]) by angle pos * freqs[i] (by its negative when inverse), in
// double, i < num_freqs.
enum class RopeDirection { kForward, kInverse };
void RotateInterleaved(float* x, const double* freqs, int64_t num_freqs, int64_t pos,
                       RopeDirection dir);

// Hyper-connection mixing (§6.1): from the mixing logits m [(2 + M) M] (already times the RMS
// factor), the scales s [3] and bases b [(2 + M) M]: pre [M], post [M] and comb [M, M]
// (comb[j * M + k]: stream j's share of new stream k) after `iters` Sinkhorn steps.
struct HcMix {
  std::vector<double> pre, post, comb;
};
void Sinkhorn(const float* m, const float* scale, const float* base, int hc, int iters, double eps,
              HcMix* out);

// One compressor entry (§5.3): per channel j < d, the softmax over candidate rows of their
// scores, weighting their values. Candidate r reads kappa[r * stride + offset[r] + j] and
// sigma[...] the same way (offset selects the channel half for ratio 4). out [d].
struct PoolCandidates {
  const float* kappa = nullptr;
  const float* sigma = nullptr;
  int64_t stride = 0;                // floats between candidate rows
  const int64_t* offsets = nullptr;  // per row
  int64_t num_rows = 0;
};
void PoolGroup(const PoolCandidates& cand, int64_t d, float* out);

}  // namespace epserve::v4
