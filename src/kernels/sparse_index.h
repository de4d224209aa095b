// The kernels of DeepSeek-V3.2's lightning indexer (DeepSeek Sparse Attention; the model side
// is model/sparse_indexer.h, the equations docs/checkpoint-format.md "DeepSeek-V3.2"):
//   - QuantizeIndexFp8: one block of 128 values to FP8 e4m3 as DeepSeek's act_quant does:
//     amax = max(max|x|, 1e-4); s = amax * (1/448), or with UE8M0 scales the power of two
//     2^ceil(log2(amax / 448)); q = e4m3(clamp(x / s, -448, 448)), nearest even.
//   - HadamardRotate: x <- H x / sqrt(n) (Sylvester order, n a power of two), in place.
//   - IndexScores: one query's score of positions [0, n):
//       score[s] = k_scale[s] * sum_h weight[h] * max(0, q[h] . k[s])
//     with q[h] and k[s] FP8 values (exact in float), each dot summed in float.
//   - SelectTopK: the k best positions, ties to the lower position, listed ascending.
// IndexScores is vectorized (Highway) and split over positions: a position's score does not
// depend on the thread count or on which other positions are scored. IndexScoresReference is
// its scalar twin (double accumulation).
#pragma once

#include <cstdint>

#include "base/thread_pool.h"

namespace epserve::kernels {

constexpr int kIndexBlock = 128;  // values per FP8 scale

// n <= kIndexBlock values of x to FP8 bytes q; returns the scale.
float QuantizeIndexFp8(const float* x, int n, bool ue8m0, uint8_t* q);

// REQUIRES: n is a power of two.
void HadamardRotate(float* x, int n);

// Where position s's key lives in a paged cache: block table[s / block_size], row
// s % block_size, at base + block * block_stride + row * row_stride (bytes). A key is
// head_dim e4m3 bytes, then its float32 scale (unaligned).
struct IndexKeyView {
  const uint8_t* base = nullptr;
  int64_t block_stride = 0;  // bytes
  int64_t row_stride = 0;    // bytes
  int64_t block_size = 0;
};

struct IndexScoreArgs {
  int num_heads = 0;
  int head_dim = 0;                // kIndexBlock
  const uint8_t* q = nullptr;      // [num_heads, head_dim] e4m3
  const float* weights = nullptr;  // [num_heads]: the head weights (times q's scales)
  IndexKeyView keys;
  const int32_t* blocks = nullptr;  // the sequence's block table
  int64_t num_positions = 0;        // positions [0, num_positions)
  float* scores = nullptr;          // [num_positions]
};

void IndexScores(const IndexScoreArgs& args, ThreadPool& pool);
void IndexScoresReference(const IndexScoreArgs& args);

// The k (<= n) positions of the largest scores, ties (and NaNs, which rank last) broken toward
// the lower position; written to out[0, k) in ascending order. Allocates a scratch of n ints.
void SelectTopK(const float* scores, int64_t n, int64_t k, int32_t* out);

}  // namespace epserve::kernels
