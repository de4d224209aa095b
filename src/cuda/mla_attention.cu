// MLA absorbed attention over the paged latent cache (twin: kernels::MlaAttentionReference).
// One thread block per (token, group of up to kHeads heads), kWarps warps. Warp w takes
// positions s = w, w + kWarps, ... up to the token's position and loads cache row s once for
// the group: lane i holds elements i, i + 32, ... of the latent part and i, i + 32 of the rotary
// part; per head, the lanes' partial dot products with q (from shared memory) are summed by a
// butterfly shuffle, and the warp keeps an online softmax: a running max m, sum l, and its
// lanes' slices of the L-wide accumulator, rescaled by exp(m_old - m_new) when the max grows.
// The warps' (m, l, acc) are then combined in shared memory, one head at a time, and
// out[t, h, :] is written normalised. Cache rows are f32 or bf16 (widened on load). All f32
// with expf (not __expf); a head's arithmetic does not depend on its group or the launch.
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "cuda/ops.h"

namespace epserve::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kMaxLatent = 512;  // L: accumulator slices live in registers (16 per lane)
constexpr int kMaxRope = 64;     // R: two values per lane

__device__ __forceinline__ float LoadElement(const float* p) { return __ldg(p); }
__device__ __forceinline__ float LoadElement(const uint16_t* p) {
  return __uint_as_float(static_cast<uint32_t>(__ldg(p)) << 16);
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

// kChunks >= L / 32: the register arrays are sized at compile time, indexed by unrolled
// constants (chunks past L / 32 are skipped). The block's kHeads heads (of one token) share
// each cache row a warp loads; their queries sit in shared memory.
template <typename T, int kChunks, int kHeads>
__global__ void __launch_bounds__(kWarps * 32) MlaAttentionKernel(MlaAttentionArgs a) {
  __shared__ float s_q[kHeads][kChunks * 32], s_qp[kHeads][kMaxRope];
  __shared__ float s_max[kWarps][kHeads], s_sum[kWarps][kHeads];
  __shared__ float s_acc[kWarps][kChunks * 32];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int groups = (a.num_heads + kHeads - 1) / kHeads;
  const int64_t t = blockIdx.x / groups;
  const int h0 = static_cast<int>(blockIdx.x % groups) * kHeads;
  const int heads = min(kHeads, a.num_heads - h0);  // the last group may be short
  const int L = a.kv_lora_rank, R = a.rope_dim, chunks = L / 32;
  const int64_t row_width = L + R;

  const int64_t first = t * a.num_heads + h0;  // (token, head) index of the block's head 0
  for (int i = static_cast<int>(threadIdx.x); i < kHeads * L; i += kWarps * 32)
    s_q[i / L][i % L] = i / L < heads ? a.q_abs[first * L + i] : 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < kHeads * kMaxRope; i += kWarps * 32)
    s_qp[i / kMaxRope][i % kMaxRope] = i / kMaxRope < heads && i % kMaxRope < R
                                           ? a.q_pe[(first + i / kMaxRope) * R + i % kMaxRope]
                                           : 0.0f;
  __syncthreads();

  const T* cache = static_cast<const T*>(a.cache);
  const int32_t* table = a.tables + a.table_offset[t];
  const int64_t n = a.token_pos[t] + 1;
  float m[kHeads], l[kHeads], acc[kHeads][kChunks];
#pragma unroll
  for (int g = 0; g < kHeads; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) acc[g][c] = 0.0f;
  }
  for (int64_t s = warp; s < n; s += kWarps) {
    const T* row = cache + static_cast<int64_t>(table[s / a.block_size]) * a.block_stride +
                   (s % a.block_size) * row_width;
    float v[kChunks];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) v[c] = c < chunks ? LoadElement(row + c * 32 + lane) : 0.0f;
    const float r0 = lane < R ? LoadElement(row + L + lane) : 0.0f;
    const float r1 = lane + 32 < R ? LoadElement(row + L + 32 + lane) : 0.0f;
    float d[kHeads];
#pragma unroll
    for (int g = 0; g < kHeads; ++g) {
      d[g] = 0.0f;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) d[g] += s_q[g][c * 32 + lane] * v[c];
      d[g] += s_qp[g][lane] * r0 + s_qp[g][lane + 32] * r1;
    }
#pragma unroll
    for (int g = 0; g < kHeads; ++g) {
      const float score = WarpSum(d[g]) * a.softmax_scale;
      const float m_new = fmaxf(m[g], score);
      const float corr = expf(m[g] - m_new);  // 0 on the warp's first position (m = -inf)
      const float p = expf(score - m_new);
      l[g] = l[g] * corr + p;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) acc[g][c] = acc[g][c] * corr + p * v[c];
      m[g] = m_new;
    }
  }

  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < kHeads; ++g) {
      s_max[warp][g] = m[g];
      s_sum[warp][g] = l[g];
    }
  }
  // One head at a time through s_acc. Warp 0 always saw position 0, so the overall max is
  // finite (for finite inputs); a warp that saw no position (m = -inf) contributes nothing.
#pragma unroll
  for (int g = 0; g < kHeads; ++g) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
      if (c < chunks) s_acc[warp][c * 32 + lane] = acc[g][c];
    __syncthreads();
    if (g < heads) {
      float mx = -INFINITY;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_max[w][g]);
      float factor[kWarps];
      float total = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        factor[w] = s_max[w][g] == -INFINITY ? 0.0f : expf(s_max[w][g] - mx);
        total += s_sum[w][g] * factor[w];
      }
      const float inv = 1.0f / total;
      float* out = a.out + (first + g) * L;
      for (int i = static_cast<int>(threadIdx.x); i < L; i += kWarps * 32) {
        float o = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) o += s_acc[w][i] * factor[w];
        out[i] = o * inv;
      }
    }
    __syncthreads();
  }
}

// Heads per block: as many as keep the accumulators (kHeads * kChunks) at 64 registers.
template <typename T, int kChunks>
void LaunchChunks(const MlaAttentionArgs& a, cudaStream_t stream) {
  constexpr int kHeads = 64 / kChunks < 8 ? 64 / kChunks : 8;
  const int64_t groups = (a.num_heads + kHeads - 1) / kHeads;
  const auto blocks = static_cast<unsigned>(a.num_tokens * groups);
  MlaAttentionKernel<T, kChunks, kHeads><<<blocks, kWarps * 32, 0, stream>>>(a);
}

template <typename T>
void Launch(const MlaAttentionArgs& a, cudaStream_t stream) {
  const int chunks = a.kv_lora_rank / 32;
  if (chunks <= 2) {
    LaunchChunks<T, 2>(a, stream);
  } else if (chunks <= 4) {
    LaunchChunks<T, 4>(a, stream);
  } else if (chunks <= 8) {
    LaunchChunks<T, 8>(a, stream);
  } else {
    LaunchChunks<T, 16>(a, stream);
  }
}

}  // namespace

Status MlaAttention(const MlaAttentionArgs& a, cudaStream_t stream) {
  if (a.num_tokens < 0) return Status::InvalidArgument("MlaAttention: negative num_tokens");
  if (a.num_tokens == 0) return Status::Ok();
  const int L = a.kv_lora_rank, R = a.rope_dim;
  if (L <= 0 || L % 32 != 0 || L > kMaxLatent)
    return Status::InvalidArgument("MlaAttention: kv_lora_rank " + std::to_string(L) +
                                   " is not a positive multiple of 32 up to " +
                                   std::to_string(kMaxLatent));
  if (R < 0 || R > kMaxRope)
    return Status::InvalidArgument("MlaAttention: rope_dim " + std::to_string(R) +
                                   " is not in [0, " + std::to_string(kMaxRope) + "]");
  if (a.num_heads <= 0) return Status::InvalidArgument("MlaAttention: num_heads must be > 0");
  if (a.num_tokens * a.num_heads > 0x7FFFFFFF)
    return Status::InvalidArgument("MlaAttention: too many (token, head) pairs for one launch");
  if (a.block_size <= 0 || a.block_stride < a.block_size * (L + R))
    return Status::InvalidArgument("MlaAttention: block_size " + std::to_string(a.block_size) +
                                   " / block_stride " + std::to_string(a.block_stride) +
                                   " cannot hold rows of " + std::to_string(L + R));
  if (a.q_abs == nullptr || (R > 0 && a.q_pe == nullptr) || a.cache == nullptr ||
      a.tables == nullptr || a.table_offset == nullptr || a.token_pos == nullptr ||
      a.out == nullptr)
    return Status::InvalidArgument("MlaAttention: null pointer argument");
  if (a.cache_bf16) {
    Launch<uint16_t>(a, stream);
  } else {
    Launch<float>(a, stream);
  }
  return LastLaunch("MlaAttention");
}

}  // namespace epserve::cuda
