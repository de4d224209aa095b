// The weight products of the forward pass on the device (ops.h; twins kernels::MatMulReference
// and kernels::MatMulTReference), written for decode, where streaming the weights once is the
// whole cost:
//   MatMul: one launch for a batch of problems that share N, K and dtype. The host lists work
//     items (problem, first row, up to 8 rows) in `scratch`; grid x covers output columns (8
//     warps per block, one warp per column n), grid y the items. A warp streams its weight row
//     once, 16 bytes per lane per load (4 f32, 8 bf16 or 16 fp8 dequantized in registers),
//     against the item's rows of x, accumulates in f32 per lane and reduces by shuffles. Rows
//     of W or x that are not 16-byte aligned take the scalar-load variants (chosen on the host).
//   MatMulT: grid (128-column tiles of K, heads, 8-token tiles); each thread owns one column k
//     for up to 8 tokens and walks its head's n rows (coalesced along k), x staged in shared.
// Each output is summed by one warp or thread in an order fixed by K alone: results do not
// depend on the grid or on how problems are batched.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/ops.h"

namespace epserve::cuda {

namespace {

constexpr int kRowsPerItem = 8;  // token rows per work item (registers per lane)
constexpr int kWarpsPerBlock = 8;
constexpr int kUnroll = 4;    // 16-byte weight loads in flight per lane
constexpr int kTCols = 128;   // MatMulT: columns per block (threads)
constexpr int kTTokens = 8;   // MatMulT: tokens per block
constexpr int kTChunk = 128;  // MatMulT: rows of x staged in shared memory at a time

// What the device needs of one MatMulProblem (strides resolved).
struct ProblemDesc {
  const float* x;
  int64_t x_stride;
  float* y;
  int64_t y_stride;
  const void* w;
  const float* scale;
  int64_t scale_row_offset;
};
struct WorkItem {
  int32_t problem;
  int32_t rows;  // 1 .. kRowsPerItem
  int64_t m0;
};
struct Shape {
  int64_t n, k, scale_cols, num_items;
  bool accumulate;
};

template <DType D>
constexpr int kElemBytes = D == DType::kF32 ? 4 : (D == DType::kBF16 ? 2 : 1);

// e4m3fn -> f32, exact (every e4m3 value is a half; 0x7F/0xFF become NaN).
__device__ __forceinline__ float Fp8ToF32(uint8_t v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(v, __NV_E4M3)));
}

// W[row][k] dequantized; `srow` is the row's scales (FP8 only).
template <DType D>
__device__ __forceinline__ float LoadW(const void* row, int64_t k, const float* srow) {
  if constexpr (D == DType::kF32) {
    return __ldg(static_cast<const float*>(row) + k);
  } else if constexpr (D == DType::kBF16) {
    return __uint_as_float(uint32_t{__ldg(static_cast<const uint16_t*>(row) + k)} << 16);
  } else {
    const uint8_t v = __ldg(static_cast<const unsigned char*>(row) + k);
    return Fp8ToF32(v) * __ldg(srow + (k >> 7));
  }
}

// The 16 bytes `raw` as 16 / elem_size floats (FP8 times `scale`).
template <DType D>
__device__ __forceinline__ void Dequantize(const uint4& raw, float scale, float* w) {
  const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (D == DType::kF32) {
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = __uint_as_float(u[i]);
  } else if constexpr (D == DType::kBF16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[2 * i] = __uint_as_float(u[i] << 16);
      w[2 * i + 1] = __uint_as_float(u[i] & 0xFFFF0000u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>(u[i / 2] >> (16 * (i % 2)));
      const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
      w[2 * i] = f.x * scale;
      w[2 * i + 1] = f.y * scale;
    }
  }
}

// acc[r] += x[r, k .. k + V) . w for the item's rows.
template <DType D, bool kVecX>
__device__ __forceinline__ void AccumulateVector(const uint4& raw, int64_t k, const float* x,
                                                 int64_t x_stride, int rows, const float* srow,
                                                 float (&acc)[kRowsPerItem]) {
  constexpr int V = 16 / kElemBytes<D>;
  float w[V];
  Dequantize<D>(raw, D == DType::kF8E4M3 ? __ldg(srow + (k >> 7)) : 1.0f, w);
#pragma unroll
  for (int r = 0; r < kRowsPerItem; ++r) {
    if (r >= rows) break;
    const float* xr = x + r * x_stride + k;
    if constexpr (kVecX) {
#pragma unroll
      for (int v = 0; v < V; v += 4) {
        const float4 q = __ldg(reinterpret_cast<const float4*>(xr + v));
        acc[r] = fmaf(q.x, w[v], acc[r]);
        acc[r] = fmaf(q.y, w[v + 1], acc[r]);
        acc[r] = fmaf(q.z, w[v + 2], acc[r]);
        acc[r] = fmaf(q.w, w[v + 3], acc[r]);
      }
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) acc[r] = fmaf(__ldg(xr + v), w[v], acc[r]);
    }
  }
}

// kVecW: every W row starts 16-byte aligned (so K is a multiple of the vector width);
// kVecX: so does every row of x.
template <DType D, bool kVecW, bool kVecX>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, 2)
    MatMulKernel(const ProblemDesc* problems, const WorkItem* items, Shape s) {
  const int lane = threadIdx.x % 32;
  const int64_t n = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  if (n >= s.n) return;  // a whole warp
  for (int64_t it = blockIdx.y; it < s.num_items; it += gridDim.y) {
    const WorkItem item = items[it];
    const ProblemDesc p = problems[item.problem];
    const float* x = p.x + item.m0 * p.x_stride;
    const void* wrow = static_cast<const uint8_t*>(p.w) + n * s.k * kElemBytes<D>;
    const float* srow = nullptr;
    if constexpr (D == DType::kF8E4M3)
      srow = p.scale + ((n + p.scale_row_offset) >> 7) * s.scale_cols;
    float acc[kRowsPerItem] = {};
    int64_t k_done = 0;
    if constexpr (kVecW) {
      constexpr int V = 16 / kElemBytes<D>;
      const uint4* w4 = static_cast<const uint4*>(wrow);
      const int64_t num_vec = s.k / V;
      int64_t i = lane;
      for (; i + (kUnroll - 1) * 32 < num_vec; i += kUnroll * 32) {
        uint4 raw[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) raw[u] = __ldg(w4 + i + u * 32);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          AccumulateVector<D, kVecX>(raw[u], (i + u * 32) * V, x, p.x_stride, item.rows, srow, acc);
      }
      for (; i < num_vec; i += 32)
        AccumulateVector<D, kVecX>(__ldg(w4 + i), i * V, x, p.x_stride, item.rows, srow, acc);
      k_done = num_vec * V;
    }
    for (int64_t k = k_done + lane; k < s.k; k += 32) {
      const float w = LoadW<D>(wrow, k, srow);
#pragma unroll
      for (int r = 0; r < kRowsPerItem; ++r) {
        if (r >= item.rows) break;
        acc[r] = fmaf(__ldg(x + r * p.x_stride + k), w, acc[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerItem; ++r) {
      if (r >= item.rows) break;  // uniform over the warp
      float v = acc[r];
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
      if (lane == 0) {
        float* y = p.y + (item.m0 + r) * p.y_stride + n;
        *y = s.accumulate ? *y + v : v;
      }
    }
  }
}

template <DType D>
void LaunchMatMul(bool vec_w, bool vec_x, dim3 grid, const ProblemDesc* problems,
                  const WorkItem* items, const Shape& s, cudaStream_t stream) {
  const int threads = kWarpsPerBlock * 32;
  if (vec_w && vec_x)
    MatMulKernel<D, true, true><<<grid, threads, 0, stream>>>(problems, items, s);
  else if (vec_w)
    MatMulKernel<D, true, false><<<grid, threads, 0, stream>>>(problems, items, s);
  else
    MatMulKernel<D, false, false><<<grid, threads, 0, stream>>>(problems, items, s);
}

struct TShape {
  int64_t k, scale_cols, x_token_stride, x_head_stride, y_token_stride, y_head_stride;
};

template <DType D>
__global__ void __launch_bounds__(kTCols) MatMulTKernel(MatMulTArgs a, TShape s) {
  __shared__ float xs[kTTokens][kTChunk];
  const int64_t k = int64_t{blockIdx.x} * kTCols + threadIdx.x;
  const int64_t h = blockIdx.y;
  const int64_t row0 = h * a.w_head_row_stride;
  const size_t row_bytes = static_cast<size_t>(s.k) * kElemBytes<D>;
  for (int64_t t0 = int64_t{blockIdx.z} * kTTokens; t0 < a.num_tokens;
       t0 += int64_t{gridDim.z} * kTTokens) {
    const int nt = static_cast<int>(min(int64_t{kTTokens}, a.num_tokens - t0));
    float acc[kTTokens] = {};
    for (int64_t j0 = 0; j0 < a.n; j0 += kTChunk) {
      const int nj = static_cast<int>(min(int64_t{kTChunk}, a.n - j0));
      __syncthreads();  // the previous chunk is consumed
      for (int i = threadIdx.x; i < kTTokens * kTChunk; i += blockDim.x) {
        const int t = i / kTChunk, j = i % kTChunk;
        xs[t][j] = t < nt && j < nj
                       ? a.x[(t0 + t) * s.x_token_stride + h * s.x_head_stride + j0 + j]
                       : 0.0f;
      }
      __syncthreads();
      if (k < s.k) {
#pragma unroll 4
        for (int j = 0; j < nj; ++j) {
          const int64_t r = row0 + j0 + j;
          const void* wrow = static_cast<const uint8_t*>(a.w.data) + r * row_bytes;
          const float* srow = nullptr;
          if constexpr (D == DType::kF8E4M3)
            srow = a.w.scale + ((r + a.w.scale_row_offset) >> 7) * s.scale_cols;
          const float w = LoadW<D>(wrow, k, srow);
#pragma unroll
          for (int t = 0; t < kTTokens; ++t) acc[t] = fmaf(xs[t][j], w, acc[t]);
        }
      }
    }
    if (k < s.k)
      for (int t = 0; t < nt; ++t)
        a.y[(t0 + t) * s.y_token_stride + h * s.y_head_stride + k] = acc[t];
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

Status Unsupported(const char* op, DType dtype) {
  return Status::InvalidArgument(std::string(op) + " on the GPU: weight dtype " + DTypeName(dtype) +
                                 " is not supported (F32, BF16 or F8_E4M3)");
}

}  // namespace

Status MatMul(const MatMulProblem* host_problems, int num_problems, const MatMulOptions& options,
              DeviceBuffer& scratch, cudaStream_t stream) {
  if (num_problems < 0 || (num_problems > 0 && host_problems == nullptr))
    return Status::InvalidArgument("MatMul: bad problem list");
  if (num_problems == 0) return Status::Ok();
  const WeightView& w0 = host_problems[0].w;
  const DType dtype = w0.dtype;
  const int64_t N = w0.rows, K = w0.cols;
  if (dtype == DType::kI8Packed) return Unsupported("MatMul", dtype);
  const int64_t elem = static_cast<int64_t>(DTypeSize(dtype));
  bool vec_w = K * elem % 16 == 0, vec_x = K % 4 == 0;
  std::vector<ProblemDesc> descs(num_problems);
  std::vector<WorkItem> items;
  for (int i = 0; i < num_problems; ++i) {
    const MatMulProblem& p = host_problems[i];
    const std::string where = "MatMul problem " + std::to_string(i) + ": ";
    if (p.w.dtype != dtype || p.w.rows != N || p.w.cols != K)
      return Status::InvalidArgument(where + "weight " + DTypeName(p.w.dtype) + " [" +
                                     std::to_string(p.w.rows) + ", " + std::to_string(p.w.cols) +
                                     "] differs from problem 0's " + DTypeName(dtype) + " [" +
                                     std::to_string(N) + ", " + std::to_string(K) + "]");
    const int64_t xs = p.x_stride ? p.x_stride : K, ys = p.y_stride ? p.y_stride : N;
    if (p.num_rows < 0 || xs < K || ys < N)
      return Status::InvalidArgument(where + "bad row count or stride");
    descs[i] = {p.x, xs, p.y, ys, p.w.data, p.w.scale, p.w.scale_row_offset};
    if (p.num_rows == 0 || N == 0) continue;
    if (p.x == nullptr || p.y == nullptr || (K > 0 && p.w.data == nullptr) ||
        (dtype == DType::kF8E4M3 && K > 0 && p.w.scale == nullptr))
      return Status::InvalidArgument(where + "null pointer");
    vec_w = vec_w && Aligned16(p.w.data);
    vec_x = vec_x && Aligned16(p.x) && xs % 4 == 0;
    for (int64_t m0 = 0; m0 < p.num_rows; m0 += kRowsPerItem)
      items.push_back(
          {i, static_cast<int32_t>(std::min<int64_t>(kRowsPerItem, p.num_rows - m0)), m0});
  }
  if (items.empty()) return Status::Ok();

  const size_t desc_bytes = (descs.size() * sizeof(ProblemDesc) + 15) / 16 * 16;
  const size_t item_bytes = items.size() * sizeof(WorkItem);
  std::vector<uint8_t> staging(desc_bytes + item_bytes);
  std::memcpy(staging.data(), descs.data(), descs.size() * sizeof(ProblemDesc));
  std::memcpy(staging.data() + desc_bytes, items.data(), item_bytes);
  RETURN_IF_ERROR(scratch.Reserve(static_cast<int64_t>(staging.size()), "MatMul descriptors"));
  // From pageable memory: returns once `staging` has been copied out, so it may go.
  RETURN_IF_ERROR(FromCuda(cudaMemcpyAsync(scratch.data(), staging.data(), staging.size(),
                                           cudaMemcpyHostToDevice, stream),
                           "copying MatMul descriptors"));
  const auto* d_descs = scratch.as<const ProblemDesc>();
  const auto* d_items = reinterpret_cast<const WorkItem*>(scratch.as<const uint8_t>() + desc_bytes);

  const Shape s{N, K, (K + kFp8BlockSize - 1) / kFp8BlockSize, static_cast<int64_t>(items.size()),
                options.accumulate};
  const dim3 grid(static_cast<unsigned>((N + kWarpsPerBlock - 1) / kWarpsPerBlock),
                  static_cast<unsigned>(std::min<int64_t>(s.num_items, 65535)));
  switch (dtype) {
    case DType::kF32:
      LaunchMatMul<DType::kF32>(vec_w, vec_x, grid, d_descs, d_items, s, stream);
      break;
    case DType::kBF16:
      LaunchMatMul<DType::kBF16>(vec_w, vec_x, grid, d_descs, d_items, s, stream);
      break;
    default:
      LaunchMatMul<DType::kF8E4M3>(vec_w, vec_x, grid, d_descs, d_items, s, stream);
      break;
  }
  return LastLaunch("MatMul");
}

Status MatMulT(const MatMulTArgs& args, cudaStream_t stream) {
  const WeightView& w = args.w;
  if (w.dtype == DType::kI8Packed) return Unsupported("MatMulT", w.dtype);
  if (args.num_tokens < 0 || args.num_heads < 0 || args.num_heads > 65535 || args.n < 0 ||
      args.w_head_row_stride < 0 ||
      (args.num_heads > 0 && (args.num_heads - 1) * args.w_head_row_stride + args.n > w.rows))
    return Status::InvalidArgument("MatMulT: heads, rows per head or head stride outside W [" +
                                   std::to_string(w.rows) + ", " + std::to_string(w.cols) + "]");
  const int64_t K = w.cols;
  if (args.num_tokens == 0 || args.num_heads == 0 || K == 0) return Status::Ok();
  if (args.y == nullptr || (args.n > 0 && (args.x == nullptr || w.data == nullptr)) ||
      (args.n > 0 && w.dtype == DType::kF8E4M3 && w.scale == nullptr))
    return Status::InvalidArgument("MatMulT: null pointer");
  // Strides of 0 mean dense [T, heads, n] and [T, heads, K].
  TShape s{K,
           (K + kFp8BlockSize - 1) / kFp8BlockSize,
           args.x_token_stride ? args.x_token_stride : args.num_heads * args.n,
           args.x_head_stride ? args.x_head_stride : args.n,
           args.y_token_stride ? args.y_token_stride : args.num_heads * K,
           args.y_head_stride ? args.y_head_stride : K};
  const dim3 grid(
      static_cast<unsigned>((K + kTCols - 1) / kTCols), static_cast<unsigned>(args.num_heads),
      static_cast<unsigned>(std::min<int64_t>((args.num_tokens + kTTokens - 1) / kTTokens, 65535)));
  switch (w.dtype) {
    case DType::kF32:
      MatMulTKernel<DType::kF32><<<grid, kTCols, 0, stream>>>(args, s);
      break;
    case DType::kBF16:
      MatMulTKernel<DType::kBF16><<<grid, kTCols, 0, stream>>>(args, s);
      break;
    default:
      MatMulTKernel<DType::kF8E4M3><<<grid, kTCols, 0, stream>>>(args, s);
      break;
  }
  return LastLaunch("MatMulT");
}

}  // namespace epserve::cuda
