// The small ops of the forward pass on the device: RMSNorm, SiLU·up, residual add, RoPE,
// embedding rows, latent cache writes, and the expert-major gather / weighted combine of a MoE
// layer. Each is a grid-stride or row-per-block kernel; CPU twins are named in ops.h.
#include <cuda_bf16.h>

#include "cuda/ops.h"

namespace epserve::cuda {

namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n, int per_block = kThreads) {
  const int64_t b = (n + per_block - 1) / per_block;
  return static_cast<int>(b < 65535 * 16 ? (b < 1 ? 1 : b) : 65535 * 16);
}

// e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities, S.1111.111 is NaN.
__device__ __forceinline__ float Fp8ToF32(uint8_t v) {
  const int sign = v >> 7, exp = (v >> 3) & 0xF, man = v & 7;
  float f;
  if (exp == 0xF && man == 7)
    f = __int_as_float(0x7FC00000);
  else if (exp == 0)
    f = ldexpf(static_cast<float>(man), -9);  // subnormal: man/8 * 2^-6
  else
    f = ldexpf(1.0f + man / 8.0f, exp - 7);
  return sign ? -f : f;
}

__device__ __forceinline__ float Bf16BitsToF32(uint16_t v) {
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}

// Round to nearest even, NaN kept a NaN (as tensor/dtype.h's F32ToBf16).
__device__ __forceinline__ uint16_t F32ToBf16Bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

__device__ float BlockSum(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += shared[w];
  __syncthreads();
  return total;
}

__global__ void RmsNormKernel(RmsNormArgs a) {
  __shared__ float shared[32];
  const float* x = a.x + blockIdx.x * a.x_stride;
  float* out = a.out + blockIdx.x * a.out_stride;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) ss += x[i] * x[i];
  ss = BlockSum(ss, shared);
  const float inv = rsqrtf(ss / static_cast<float>(a.n) + a.eps);
  for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) out[i] = x[i] * inv * a.weight[i];
}

__global__ void SiluMulKernel(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void AddKernel(const float* x, int64_t n, float* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] += x[i];
}

__global__ void RopeKernel(RopeArgs a) {
  const int half = a.rope_dim / 2;
  const int64_t n = a.rows * half;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / half;
    const int p = static_cast<int>(i % half);
    float* v = a.x + r * a.row_stride + 2 * p;
    const float* cs = a.table + a.positions[r / a.rows_per_position] * a.rope_dim + 2 * p;
    const float x0 = v[0], x1 = v[1];
    v[0] = x0 * cs[0] - x1 * cs[1];
    v[1] = x0 * cs[1] + x1 * cs[0];
  }
}

__global__ void EmbedKernel(WeightView w, const int32_t* tokens, int64_t num_tokens, float* out) {
  const int64_t H = w.cols, n = num_tokens * H;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / H, c = i % H, r = tokens[t];
    float v;
    if (w.dtype == DType::kF32) {
      v = static_cast<const float*>(w.data)[r * H + c];
    } else if (w.dtype == DType::kBF16) {
      v = Bf16BitsToF32(static_cast<const uint16_t*>(w.data)[r * H + c]);
    } else {
      const int64_t sr = (r + w.scale_row_offset) / kFp8BlockSize;
      v = Fp8ToF32(static_cast<const uint8_t*>(w.data)[r * H + c]) *
          w.scale[sr * ((H + kFp8BlockSize - 1) / kFp8BlockSize) + c / kFp8BlockSize];
    }
    out[i] = v;
  }
}

__global__ void KvWriteKernel(KvWriteArgs a) {
  const int64_t n = a.num_tokens * a.width;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / a.width, c = i % a.width;
    const int64_t at =
        a.token_block[t] * a.block_stride + (a.token_pos[t] % a.block_size) * a.width + c;
    if (a.cache_bf16)
      static_cast<uint16_t*>(a.cache)[at] = F32ToBf16Bits(a.rows[i]);
    else
      static_cast<float*>(a.cache)[at] = a.rows[i];
  }
}

__global__ void GatherKernel(const float* x, const int64_t* pair_row, int64_t num_pairs, int top_k,
                             int64_t h, float* packed) {
  for (int64_t pair = blockIdx.x; pair < num_pairs; pair += gridDim.x) {
    const int64_t row = pair_row[pair];
    if (row < 0) continue;
    const float* src = x + (pair / top_k) * h;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) packed[row * h + c] = src[c];
  }
}

__global__ void CombineKernel(const float* packed, const int64_t* pair_row, const float* weights,
                              int64_t num_tokens, int top_k, int64_t h, float* out) {
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x)
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
      float acc = out[t * h + c];
      for (int k = 0; k < top_k; ++k) {
        const int64_t row = pair_row[t * top_k + k];
        if (row >= 0) acc += weights[t * top_k + k] * packed[row * h + c];
      }
      out[t * h + c] = acc;
    }
}

}  // namespace

Status RmsNorm(const RmsNormArgs& args, cudaStream_t stream) {
  if (args.rows == 0) return Status::Ok();
  RmsNormArgs a = args;
  if (a.x_stride == 0) a.x_stride = a.n;
  if (a.out_stride == 0) a.out_stride = a.n;
  if (a.rows > 2147483647) return Status::InvalidArgument("RmsNorm: too many rows");
  RmsNormKernel<<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(a);
  return LastLaunch("RmsNorm");
}

Status SiluMul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  SiluMulKernel<<<Blocks(n), kThreads, 0, stream>>>(gate, up, n, out);
  return LastLaunch("SiluMul");
}

Status Add(const float* x, int64_t n, float* y, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  AddKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, y);
  return LastLaunch("Add");
}

Status Rope(const RopeArgs& args, cudaStream_t stream) {
  if (args.rows == 0) return Status::Ok();
  if (args.rope_dim % 2 != 0) return Status::InvalidArgument("Rope: odd rope_dim");
  RopeKernel<<<Blocks(args.rows * args.rope_dim / 2), kThreads, 0, stream>>>(args);
  return LastLaunch("Rope");
}

Status EmbedRows(const WeightView& embed, const int32_t* tokens, int64_t num_tokens, float* out,
                 cudaStream_t stream) {
  if (num_tokens == 0) return Status::Ok();
  if (embed.dtype != DType::kF32 && embed.dtype != DType::kBF16 && embed.dtype != DType::kF8E4M3)
    return Status::InvalidArgument(std::string("EmbedRows: no CUDA kernel for weights of dtype ") +
                                   DTypeName(embed.dtype));
  EmbedKernel<<<Blocks(num_tokens * embed.cols), kThreads, 0, stream>>>(embed, tokens, num_tokens,
                                                                        out);
  return LastLaunch("EmbedRows");
}

Status KvWrite(const KvWriteArgs& args, cudaStream_t stream) {
  if (args.num_tokens == 0) return Status::Ok();
  KvWriteKernel<<<Blocks(args.num_tokens * args.width), kThreads, 0, stream>>>(args);
  return LastLaunch("KvWrite");
}

Status GatherRows(const float* x, const int64_t* pair_row, int64_t num_pairs, int top_k, int64_t h,
                  float* packed, cudaStream_t stream) {
  if (num_pairs == 0) return Status::Ok();
  GatherKernel<<<Blocks(num_pairs, 1), 128, 0, stream>>>(x, pair_row, num_pairs, top_k, h, packed);
  return LastLaunch("GatherRows");
}

Status Combine(const float* packed, const int64_t* pair_row, const float* weights,
               int64_t num_tokens, int top_k, int64_t h, float* out, cudaStream_t stream) {
  if (num_tokens == 0) return Status::Ok();
  CombineKernel<<<Blocks(num_tokens, 1), kThreads, 0, stream>>>(packed, pair_row, weights,
                                                                num_tokens, top_k, h, out);
  return LastLaunch("Combine");
}

}  // namespace epserve::cuda
