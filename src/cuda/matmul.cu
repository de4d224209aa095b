// The weight products of the forward pass on the device (ops.h; twins kernels::MatMulReference
// and kernels::MatMulTReference), written for decode, where streaming the weights once is the
// whole cost:
//   MatMul: one launch for a batch of problems that share N, K and dtype. Work items are
//     (problem, first row, up to 8 rows): listed by the host in `scratch`, or, for a single
//     problem, derived from the item index (nothing uploaded), or, for GroupedMatMul, listed
//     with their count by a one-block kernel from the device's expert offsets (the grid then
//     covers the host's bound on the count; blocks past the count return at once).
//     Grid x covers the items, grid y the column groups of 8 * C columns (8 warps per block,
//     C = 1, 2 or 4 adjacent columns per warp, chosen on the host: the largest that still
//     gives >= 2 blocks per SM). Items are the fast grid dimension, so the blocks that share
//     a column group (the same weight rows) run side by side and re-read those rows from L2,
//     not HBM.
//     The block walks K in chunks: its threads start copying the chunk of the item's x rows
//     into shared memory (cp.async, 16 bytes a copy, each warp 512 contiguous bytes), each warp
//     issues its weight loads for the chunk meanwhile (16 bytes per lane and column per sweep of
//     32 lanes: 4 f32, 8 bf16 or 16 fp8 values, dequantized in registers), and after a barrier
//     every warp reads x from shared memory once for all its C columns (a float4 feeds 4 * C
//     FMAs). Shared layout of a chunk: the V/4 float4s of x that face lane l's 16-byte weight
//     vector of a sweep are stored 32 float4s apart, so a warp's float4 reads are conflict-free.
//     Rows of W or x that are not 16-byte aligned take the scalar variants (chosen on the
//     host; W unaligned: C = 1, 4-byte loads, 1024-value chunks).
//     Sizes, per block of 256 threads (C = 1 / 2 / 4): U sweeps per chunk, U * C 16-byte loads
//     in flight per lane (f32 4 / 4 / 8, bf16 8 / 6 / 8, fp8 4 / 4 / 8), chunks of 512 / 256 /
//     256 f32, 2048 / 768 / 512 bf16, 2048 / 1024 / 1024 fp8 values; shared memory = rows of
//     the largest item x chunk x 4 bytes: at 8 rows 16 / 8 / 8 KB f32, 64 / 24 / 16 KB bf16,
//     64 / 32 / 32 KB fp8 (1/8 of that at 1 row). Registers (ptxas, sm_90a, no spills): <= 80
//     at C = 1 and 2 (__launch_bounds__ min 3 blocks: 24 warps per SM), <= 128 at C = 4 (min
//     2: 16 warps). On an H200 (228 KB shared, 64 K registers per SM) registers, not shared
//     memory, bound residency: even three 64 KB blocks fit.
//   MatMulT: grid (128-column tiles of K, heads, 8-token tiles); each thread owns one column k
//     for up to 8 tokens and walks its head's n rows (coalesced along k), x staged in shared.
// Each output is summed by one warp or thread in an order fixed by K alone: in MatMul lane l
// takes the 16-byte vectors l, l + 32, ... of the row (or, scalar, k = l, l + 32, ...), in
// ascending order, accumulates each value in f32 in that order, and the 32 lane sums are added
// by the same xor-shuffle tree; chunks, C, how rows are grouped into items, M and the grid change
// none of it. Results do not depend on the grid or on how problems are batched.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/block_scan.cuh"
#include "cuda/ops.h"

namespace epserve::cuda {

namespace {

constexpr int kRowsPerItem = 8;  // token rows per work item (registers per lane)
constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarpsPerBlock * 32;
constexpr int kScalarChunk = 1024;  // MatMul, W not 16-byte aligned: K elements per chunk
constexpr int kTCols = 128;         // MatMulT: columns per block (threads)
constexpr int kTTokens = 8;         // MatMulT: tokens per block
constexpr int kTChunk = 128;        // MatMulT: rows of x staged in shared memory at a time

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
  int64_t n, k, scale_cols, num_items, num_groups;
  bool accumulate;
  // Without an item list (one problem): that problem, its items the rows 8i .. 8i + 7.
  ProblemDesc single;
  int64_t single_rows;
  // GroupedMatMul: the item count, written on the device (num_items is then the host's bound,
  // which is also grid x: at most 2^31 - 1); null: num_items is the count.
  const int32_t* device_num_items;
};
// A table entry of ExpertWeightTable: one expert's weight (its shape is the table's).
struct ExpertWeightDesc {
  const void* w;
  const float* scale;
  int64_t scale_row_offset;
};

template <DType D>
constexpr int kElemBytes = D == DType::kF32 ? 4 : (D == DType::kBF16 ? 2 : 1);
template <DType D>
constexpr int kVecElems = 16 / kElemBytes<D>;  // V: values per 16-byte load
// Sweeps (32 lanes x 16 bytes) per chunk, so U * C 16-byte weight loads in flight per lane: as
// many as kMinBlocks' register budget holds without spills (ptxas -v, sm_90a): 4 / 4 / 8 for
// f32, 8 / 6 / 8 for bf16, 4 / 4 / 8 for fp8 at C = 1 / 2 / 4.
template <DType D, int C>
constexpr int kSweeps = C == 4 ? 2 : (D == DType::kBF16 ? (C == 1 ? 8 : 3) : 4 / C);
// K elements per chunk of x in shared memory.
template <DType D, int C, bool kVecW>
constexpr int kChunk = kVecW ? kSweeps<D, C> * 32 * kVecElems<D> : kScalarChunk;
// Minimum resident blocks per SM for __launch_bounds__ (registers: 128 at 2, 80 at 3).
template <int C>
constexpr int kMinBlocks = C == 4 ? 2 : 3;

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

// Values 4g .. 4g + 3 of the 16 bytes `raw` as floats (FP8 times `scale`).
// (g is a constant once the caller's loops are unrolled.)
template <DType D>
__device__ __forceinline__ void Dequantize4(const uint4& raw, int g, float scale, float (&w)[4]) {
  const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (D == DType::kF32) {
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = __uint_as_float(u[i]);
  } else if constexpr (D == DType::kBF16) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      w[2 * i] = __uint_as_float(u[2 * g + i] << 16);
      w[2 * i + 1] = __uint_as_float(u[2 * g + i] & 0xFFFF0000u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>(u[g] >> (16 * i));
      const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
      w[2 * i] = f.x * scale;
      w[2 * i + 1] = f.y * scale;
    }
  }
}

// Shared-memory position of element kk of a chunk (16-byte W rows): lane l's vector of V values
// in each sweep of 32 * V becomes V/4 float4s at l, l + 32, ... of that sweep's float4s.
template <int V>
__device__ __forceinline__ int SmemPos(int kk) {
  const int in_sweep = kk % (32 * V);
  return kk - in_sweep + (in_sweep % V / 4) * 128 + in_sweep / V * 4 + kk % 4;
}

// Asynchronous global -> shared copies (sm_80+; a plain copy before).
__device__ __forceinline__ void CopyAsync16(float* dst, const float* src) {
#if __CUDA_ARCH__ >= 800
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
#else
  *reinterpret_cast<float4*>(dst) = __ldg(reinterpret_cast<const float4*>(src));
#endif
}
__device__ __forceinline__ void CopyAsync4(float* dst, const float* src) {
#if __CUDA_ARCH__ >= 800
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(src) : "memory");
#else
  *dst = __ldg(src);
#endif
}
__device__ __forceinline__ void WaitCopies() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Starts copying x[r][k0 .. k0 + len) of the item's rows to xs[r * KC + position] (kPermute:
// SmemPos, else identity). kVecX: 16-byte copies; each warp takes 32 adjacent float4s (512
// contiguous bytes) in an order that makes its shared writes conflict-free.
template <int V, int KC, bool kPermute, bool kVecX>
__device__ __forceinline__ void StageX(const float* x, int64_t x_stride, int rows, int k0, int len,
                                       float* xs) {
  const int lane = threadIdx.x % 32;
  x += k0;
  if constexpr (kVecX) {
    constexpr int P = kPermute ? V / 4 : 1;  // float4s per weight vector
    const int len4 = len / 4;
    const int warp_first = static_cast<int>(threadIdx.x) - lane;
    const int q_lane = P * (lane % (32 / P)) + lane / (32 / P);
#pragma unroll 1
    for (int r = 0; r < rows; ++r, x += x_stride, xs += KC)
#pragma unroll 1
      for (int q0 = warp_first; q0 < len4; q0 += kThreads) {
        const int q = q0 + q_lane;
        if (q < len4) CopyAsync16(xs + (kPermute ? SmemPos<V>(4 * q) : 4 * q), x + 4 * q);
      }
  } else {
#pragma unroll 1
    for (int r = 0; r < rows; ++r, x += x_stride, xs += KC)
#pragma unroll 1
      for (int e = threadIdx.x; e < len; e += kThreads)
        CopyAsync4(xs + (kPermute ? SmemPos<V>(e) : e), x + e);
  }
}

// kVecW: every W row starts 16-byte aligned and V divides K; kVecX: every row of x starts
// 16-byte aligned and 4 divides K. Dynamic shared memory: rows of the largest item x KC floats.
template <DType D, int C, bool kVecW, bool kVecX>
__global__ void __launch_bounds__(kThreads, kMinBlocks<C>)
    MatMulKernel(const ProblemDesc* problems, const WorkItem* items, Shape s) {
  constexpr int V = kVecElems<D>;
  constexpr int U = kSweeps<D, C>;
  constexpr int KC = kChunk<D, C, kVecW>;
  extern __shared__ float4 smem[];
  float* xs = reinterpret_cast<float*>(smem);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  // Blocks past a device-written count have nothing to do. (The grid then has s.num_items, the
  // host's bound, blocks in x, so each block takes item blockIdx.x alone: the loop below keeps
  // its bound in the parameters, not in a register.)
  if (s.device_num_items != nullptr && blockIdx.x >= *s.device_num_items) return;
  for (int64_t group = blockIdx.y; group < s.num_groups; group += gridDim.y) {
    // This warp's columns n0 .. n0 + C - 1; those past N load row N - 1 and store nothing (the
    // warp still takes part in staging and barriers).
    const int64_t n0 = (group * kWarpsPerBlock + warp) * C;
    for (int64_t it = blockIdx.x; it < s.num_items; it += gridDim.x) {
      ProblemDesc p;
      int rows;
      int64_t m0;
      if (items == nullptr) {
        p = s.single;
        m0 = it * kRowsPerItem;
        rows = static_cast<int>(min(int64_t{kRowsPerItem}, s.single_rows - m0));
      } else {
        const WorkItem item = items[it];
        p = problems[item.problem];
        rows = item.rows;
        m0 = item.m0;
      }
      const float* x = p.x + m0 * p.x_stride;
      // Column n0 + c is the row at wbase + col[c] bytes, its scales at sbase + scol[c] (columns
      // past N: row N - 1). 32-bit offsets: the host keeps K under 2^26.
      const int K = static_cast<int>(s.k);
      const int64_t nbase = min(n0, s.n - 1);
      const uint8_t* wbase = static_cast<const uint8_t*>(p.w) + nbase * s.k * kElemBytes<D>;
      const float* sbase = nullptr;
      int col[C], scol[C];
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const int64_t n = min(n0 + c, s.n - 1);
        col[c] = static_cast<int>(n - nbase) * K * kElemBytes<D>;
        scol[c] = 0;
        if constexpr (D == DType::kF8E4M3) {
          sbase = p.scale + ((nbase + p.scale_row_offset) >> 7) * s.scale_cols;
          scol[c] = static_cast<int>(((n + p.scale_row_offset) >> 7) -
                                     ((nbase + p.scale_row_offset) >> 7)) *
                    static_cast<int>(s.scale_cols);
        }
      }
      float acc[kRowsPerItem][C] = {};
      for (int k0 = 0; k0 < K; k0 += KC) {
        const int len = min(KC, K - k0);
        if constexpr (kVecW) {
          __syncthreads();  // every warp is done with the previous chunk
          StageX<V, KC, true, kVecX>(x, p.x_stride, rows, k0, len, xs);
          // This chunk's weights for the lane, vectors i0 + 32u: in flight with the copies.
          const int num_vec = K / V;
          const int i0 = k0 / V + lane;
          const uint8_t* wk = wbase + int64_t{i0} * 16;
          uint4 raw[U][C];
#pragma unroll
          for (int u = 0; u < U; ++u)
#pragma unroll
            for (int c = 0; c < C; ++c)
              raw[u][c] = i0 + u * 32 < num_vec
                              ? __ldg(reinterpret_cast<const uint4*>(wk + col[c] + u * 512))
                              : make_uint4(0, 0, 0, 0);
          WaitCopies();
          __syncthreads();
#pragma unroll
          for (int u = 0; u < U; ++u) {
            if (i0 + u * 32 >= num_vec) break;  // and so are the lane's later vectors
            const float* xu = xs + u * 32 * V + lane * 4;
            float scale[C];  // FP8: the vector's block scale (an L1 hit for most lanes)
#pragma unroll
            for (int c = 0; c < C; ++c)
              scale[c] =
                  D == DType::kF8E4M3 ? __ldg(sbase + scol[c] + (((i0 + u * 32) * V) >> 7)) : 1.0f;
#pragma unroll
            for (int g = 0; g < V / 4; ++g) {
              float w[C][4];
#pragma unroll
              for (int c = 0; c < C; ++c) Dequantize4<D>(raw[u][c], g, scale[c], w[c]);
#pragma unroll
              for (int r = 0; r < kRowsPerItem; ++r) {
                if (r >= rows) break;
                const float4 q = *reinterpret_cast<const float4*>(xu + r * KC + g * 128);
#pragma unroll
                for (int c = 0; c < C; ++c) {
                  acc[r][c] = fmaf(q.x, w[c][0], acc[r][c]);
                  acc[r][c] = fmaf(q.y, w[c][1], acc[r][c]);
                  acc[r][c] = fmaf(q.z, w[c][2], acc[r][c]);
                  acc[r][c] = fmaf(q.w, w[c][3], acc[r][c]);
                }
              }
            }
          }
        } else {
          __syncthreads();  // every warp is done with the previous chunk
          StageX<V, KC, false, kVecX>(x, p.x_stride, rows, k0, len, xs);
          WaitCopies();
          __syncthreads();
#pragma unroll 4
          for (int kk = lane; kk < len; kk += 32) {
            float w[C];
#pragma unroll
            for (int c = 0; c < C; ++c) w[c] = LoadW<D>(wbase + col[c], k0 + kk, sbase + scol[c]);
#pragma unroll
            for (int r = 0; r < kRowsPerItem; ++r) {
              if (r >= rows) break;
              const float xv = xs[r * KC + kk];
#pragma unroll
              for (int c = 0; c < C; ++c) acc[r][c] = fmaf(xv, w[c], acc[r][c]);
            }
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kRowsPerItem; ++r) {
        if (r >= rows) break;  // uniform over the block
#pragma unroll
        for (int c = 0; c < C; ++c) {
          float v = acc[r][c];
          for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
          if (lane == c && n0 + c < s.n) {
            float* y = p.y + (m0 + r) * p.y_stride + n0 + c;
            *y = s.accumulate ? *y + v : v;
          }
        }
      }
    }
  }
}

// Launches one variant with `rows` rows of x per chunk in shared memory.
template <DType D, int C, bool kVecW, bool kVecX>
Status LaunchMatMul(dim3 grid, int rows, const ProblemDesc* problems, const WorkItem* items,
                    const Shape& s, cudaStream_t stream) {
  constexpr int kMaxSmem = kRowsPerItem * kChunk<D, C, kVecW> * 4;
  static_assert(kMaxSmem <= 64 * 1024);
  auto* kernel = MatMulKernel<D, C, kVecW, kVecX>;
  if constexpr (kMaxSmem > 48 * 1024) {
    // Over the default 48 KB of dynamic shared memory: allowed once per device.
    static std::atomic<uint64_t> allowed{0};
    int device = 0;
    RETURN_IF_ERROR(FromCuda(cudaGetDevice(&device), "MatMul: current device"));
    const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
    if (bit == 0 || (allowed.load(std::memory_order_relaxed) & bit) == 0) {
      RETURN_IF_ERROR(FromCuda(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmem),
          "MatMul: allowing 64 KB of shared memory"));
      allowed.fetch_or(bit, std::memory_order_relaxed);
    }
  }
  const size_t smem = static_cast<size_t>(rows) * kChunk<D, C, kVecW> * sizeof(float);
  kernel<<<grid, kThreads, smem, stream>>>(problems, items, s);
  return Status::Ok();
}

template <DType D>
Status LaunchMatMul(int columns, bool vec_w, bool vec_x, dim3 grid, int rows,
                    const ProblemDesc* problems, const WorkItem* items, const Shape& s,
                    cudaStream_t stream) {
  if (!vec_w) return LaunchMatMul<D, 1, false, false>(grid, rows, problems, items, s, stream);
  switch (columns) {
    case 4:
      return vec_x ? LaunchMatMul<D, 4, true, true>(grid, rows, problems, items, s, stream)
                   : LaunchMatMul<D, 4, true, false>(grid, rows, problems, items, s, stream);
    case 2:
      return vec_x ? LaunchMatMul<D, 2, true, true>(grid, rows, problems, items, s, stream)
                   : LaunchMatMul<D, 2, true, false>(grid, rows, problems, items, s, stream);
    default:
      return vec_x ? LaunchMatMul<D, 1, true, true>(grid, rows, problems, items, s, stream)
                   : LaunchMatMul<D, 1, true, false>(grid, rows, problems, items, s, stream);
  }
}

// Columns per warp: the most (4, 2, 1) that still give at least 2 blocks per SM.
int ColumnsPerWarp(int64_t n, int64_t num_items, int num_sms, bool vec_w) {
  if (!vec_w) return 1;
  for (int c : {4, 2})
    if (num_items * ((n + kWarpsPerBlock * c - 1) / (kWarpsPerBlock * c)) >= 2 * num_sms) return c;
  return 1;
}

// Whether the kernels read weights of `dtype`: F32, BF16 and F8_E4M3 with its block scales.
// Int8-requantized (--requant int8) and FP4 weights have no CUDA kernel, and the storage types
// (F8_E8M0, I8, I32, I64: tensor/dtype.h) are no weight's. Every entry point checks this first.
bool HasKernel(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF8E4M3:
      return true;
    case DType::kI8Packed:
    case DType::kF4E2M1:
    case DType::kF8E8M0:
    case DType::kI8:
    case DType::kI32:
    case DType::kI64:
      return false;
  }
  return false;
}

Status Unsupported(const char* op, DType dtype) {
  return Status::InvalidArgument(std::string(op) + " on the GPU: weight dtype " + DTypeName(dtype) +
                                 " is not supported (F32, BF16 or F8_E4M3)");
}

// Launches the MatMul kernel over `s` (s.num_items items, or at most that many when the count
// is on the device), choosing C and the grid: sets s.num_groups.
Status LaunchItems(DType dtype, bool vec_w, bool vec_x, int max_rows, const ProblemDesc* problems,
                   const WorkItem* items, Shape& s, cudaStream_t stream) {
  int device = 0, num_sms = 0;
  RETURN_IF_ERROR(FromCuda(cudaGetDevice(&device), "MatMul: current device"));
  RETURN_IF_ERROR(FromCuda(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device),
                           "MatMul: SM count"));
  const int columns = ColumnsPerWarp(s.n, s.num_items, num_sms, vec_w);
  s.num_groups = (s.n + kWarpsPerBlock * columns - 1) / (kWarpsPerBlock * columns);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(s.num_items, 0x7FFFFFFF)),
                  static_cast<unsigned>(std::min<int64_t>(s.num_groups, 65535)));
  switch (dtype) {
    case DType::kF32:
      return LaunchMatMul<DType::kF32>(columns, vec_w, vec_x, grid, max_rows, problems, items, s,
                                       stream);
    case DType::kBF16:
      return LaunchMatMul<DType::kBF16>(columns, vec_w, vec_x, grid, max_rows, problems, items, s,
                                        stream);
    case DType::kF8E4M3:
      return LaunchMatMul<DType::kF8E4M3>(columns, vec_w, vec_x, grid, max_rows, problems, items, s,
                                          stream);
    case DType::kI8Packed:
    case DType::kF4E2M1:
    case DType::kF8E8M0:
    case DType::kI8:
    case DType::kI32:
    case DType::kI64:
      break;
  }
  return Unsupported("MatMul", dtype);
}

// GroupedMatMul's bookkeeping, one block: the descriptors of problem o * E + e (expert e's rows
// through output o's weight), the items (expert e's rows in items of up to 8; the outputs of one
// item of rows adjacent) and their count.
constexpr int kBuildThreads = 1024;
struct GroupedBuild {
  const int64_t* offsets;
  int num_experts, num_outputs;
  const ExpertWeightDesc* w[2];
  const float* x;
  int64_t x_stride;
  float* y[2];
  int64_t y_stride;
  int64_t max_rows;   // the caller's bound on offsets[E]
  int64_t max_items;  // room in `items`
  ProblemDesc* problems;
  WorkItem* items;
  int32_t* num_items;
};
// Dynamic shared memory: first[E + 1], the first item of each expert.
__global__ void __launch_bounds__(kBuildThreads) BuildGroupedItems(GroupedBuild g) {
  extern __shared__ int32_t first[];
  __shared__ int32_t warp_sums[32];
  const int E = g.num_experts;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const int64_t r0 = g.offsets[e];
    first[e] = static_cast<int32_t>((g.offsets[e + 1] - r0 + kRowsPerItem - 1) / kRowsPerItem);
    for (int o = 0; o < g.num_outputs; ++o) {
      const ExpertWeightDesc w = g.w[o][e];
      g.problems[o * E + e] = {
          g.x + r0 * g.x_stride, g.x_stride, g.y[o] + r0 * g.y_stride, g.y_stride, w.w, w.scale,
          w.scale_row_offset};
    }
  }
  __syncthreads();
  int32_t total = BlockExclusiveScan(first, E, warp_sums);
  // Offsets past the caller's bound (a broken layout): run nothing rather than overrun `items`
  // or the shared memory sized for min(8, max_rows) rows.
  if (g.offsets[E] > g.max_rows || int64_t{total} * g.num_outputs > g.max_items) total = 0;
  if (threadIdx.x == 0) {
    first[E] = total;
    *g.num_items = total * g.num_outputs;
  }
  __syncthreads();
  for (int32_t i = threadIdx.x; i < total; i += blockDim.x) {
    int lo = 0, hi = E;  // first[lo] <= i < first[hi]: expert lo owns item i
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (first[mid] <= i)
        lo = mid;
      else
        hi = mid;
    }
    const int64_t m0 = int64_t{i - first[lo]} * kRowsPerItem;
    const auto rows =
        static_cast<int32_t>(min(int64_t{kRowsPerItem}, g.offsets[lo + 1] - g.offsets[lo] - m0));
    for (int o = 0; o < g.num_outputs; ++o)
      g.items[int64_t{i} * g.num_outputs + o] = {o * E + lo, rows, m0};
  }
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

}  // namespace

Status MatMul(const MatMulProblem* host_problems, int num_problems, const MatMulOptions& options,
              DeviceBuffer& scratch, cudaStream_t stream) {
  if (num_problems < 0 || (num_problems > 0 && host_problems == nullptr))
    return Status::InvalidArgument("MatMul: bad problem list");
  if (num_problems == 0) return Status::Ok();
  const WeightView& w0 = host_problems[0].w;
  const DType dtype = w0.dtype;
  const int64_t N = w0.rows, K = w0.cols;
  if (!HasKernel(dtype)) return Unsupported("MatMul", dtype);
  if (K > (int64_t{1} << 26))  // the kernel's 32-bit offsets
    return Status::InvalidArgument("MatMul: K = " + std::to_string(K) + " is over 2^26");
  const int64_t elem = static_cast<int64_t>(DTypeSize(dtype));
  bool vec_w = K * elem % 16 == 0, vec_x = K % 4 == 0;
  std::vector<ProblemDesc> descs(num_problems);
  std::vector<WorkItem> items;
  int busy = -1;  // the only problem with rows, or -2 when several have
  int max_rows = 0;
  for (int i = 0; i < num_problems; ++i) {
    const MatMulProblem& p = host_problems[i];
    // (Built only for an error: this loop runs for every expert of every layer.)
    const auto where = [i] { return "MatMul problem " + std::to_string(i) + ": "; };
    if (p.w.dtype != dtype || p.w.rows != N || p.w.cols != K)
      return Status::InvalidArgument(where() + "weight " + DTypeName(p.w.dtype) + " [" +
                                     std::to_string(p.w.rows) + ", " + std::to_string(p.w.cols) +
                                     "] differs from problem 0's " + DTypeName(dtype) + " [" +
                                     std::to_string(N) + ", " + std::to_string(K) + "]");
    const int64_t xs = p.x_stride ? p.x_stride : K, ys = p.y_stride ? p.y_stride : N;
    if (p.num_rows < 0 || xs < K || ys < N)
      return Status::InvalidArgument(where() + "bad row count or stride");
    descs[i] = {p.x, xs, p.y, ys, p.w.data, p.w.scale, p.w.scale_row_offset};
    if (p.num_rows == 0 || N == 0) continue;
    if (p.x == nullptr || p.y == nullptr || (K > 0 && p.w.data == nullptr) ||
        (dtype == DType::kF8E4M3 && K > 0 && p.w.scale == nullptr))
      return Status::InvalidArgument(where() + "null pointer");
    vec_w = vec_w && Aligned16(p.w.data);
    vec_x = vec_x && Aligned16(p.x) && xs % 4 == 0;
    busy = busy == -1 ? i : -2;
    max_rows =
        static_cast<int>(std::max<int64_t>(max_rows, std::min<int64_t>(kRowsPerItem, p.num_rows)));
    for (int64_t m0 = 0; m0 < p.num_rows; m0 += kRowsPerItem)
      items.push_back(
          {i, static_cast<int32_t>(std::min<int64_t>(kRowsPerItem, p.num_rows - m0)), m0});
  }
  if (items.empty()) return Status::Ok();

  Shape s{.n = N,
          .k = K,
          .scale_cols = (K + kFp8BlockSize - 1) / kFp8BlockSize,
          .num_items = static_cast<int64_t>(items.size()),
          .num_groups = 0,
          .accumulate = options.accumulate,
          .single = {},
          .single_rows = 0,
          .device_num_items = nullptr};
  const ProblemDesc* d_descs = nullptr;
  const WorkItem* d_items = nullptr;
  if (busy >= 0) {
    // One problem: its descriptor travels in the launch's parameters, nothing is uploaded.
    s.single = descs[busy];
    s.single_rows = host_problems[busy].num_rows;
  } else {
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
    d_descs = scratch.as<const ProblemDesc>();
    d_items = reinterpret_cast<const WorkItem*>(scratch.as<const uint8_t>() + desc_bytes);
  }

  RETURN_IF_ERROR(LaunchItems(dtype, vec_w, vec_x, max_rows, d_descs, d_items, s, stream));
  return LastLaunch("MatMul");
}

Status MakeExpertWeightTable(const WeightView* views, int num_experts, DeviceBuffer& storage,
                             ExpertWeightTable* table) {
  if (num_experts < 1 || views == nullptr || table == nullptr)
    return Status::InvalidArgument("MakeExpertWeightTable: no experts");
  const WeightView& v0 = views[0];
  if (!HasKernel(v0.dtype)) return Unsupported("GroupedMatMul", v0.dtype);
  std::vector<ExpertWeightDesc> descs(num_experts);
  bool aligned = true;
  for (int e = 0; e < num_experts; ++e) {
    const WeightView& v = views[e];
    if (v.dtype != v0.dtype || v.rows != v0.rows || v.cols != v0.cols)
      return Status::InvalidArgument("expert " + std::to_string(e) + "'s weight " +
                                     DTypeName(v.dtype) + " [" + std::to_string(v.rows) + ", " +
                                     std::to_string(v.cols) + "] differs from expert 0's " +
                                     DTypeName(v0.dtype) + " [" + std::to_string(v0.rows) + ", " +
                                     std::to_string(v0.cols) + "]");
    if (v.rows > 0 && v.cols > 0 &&
        (v.data == nullptr || (v.dtype == DType::kF8E4M3 && v.scale == nullptr)))
      return Status::InvalidArgument("expert " + std::to_string(e) + ": null weight pointer");
    descs[e] = {v.data, v.scale, v.scale_row_offset};
    aligned = aligned && Aligned16(v.data);
  }
  RETURN_IF_ERROR(storage.Upload(descs.data(),
                                 static_cast<int64_t>(descs.size() * sizeof(ExpertWeightDesc)),
                                 "an expert weight table"));
  *table = {.entries = storage.data(),
            .num_experts = num_experts,
            .dtype = v0.dtype,
            .n = v0.rows,
            .k = v0.cols,
            .aligned16 = aligned};
  return Status::Ok();
}

Status GroupedMatMul(const GroupedMatMulArgs& a, DeviceBuffer& scratch, cudaStream_t stream) {
  if (a.num_outputs < 1 || a.num_outputs > 2)
    return Status::InvalidArgument("GroupedMatMul: 1 or 2 outputs, not " +
                                   std::to_string(a.num_outputs));
  const ExpertWeightTable& t0 = a.weights[0];
  const int E = t0.num_experts;
  const int64_t N = t0.n, K = t0.k;
  const DType dtype = t0.dtype;
  if (E < 1 || E > kMaxLayoutExperts)
    return Status::InvalidArgument("GroupedMatMul: " + std::to_string(E) + " experts (1 .. " +
                                   std::to_string(kMaxLayoutExperts) + ")");
  if (!HasKernel(dtype)) return Unsupported("GroupedMatMul", dtype);
  if (K > (int64_t{1} << 26))  // the kernel's 32-bit offsets
    return Status::InvalidArgument("GroupedMatMul: K = " + std::to_string(K) + " is over 2^26");
  bool vec_w = K * static_cast<int64_t>(DTypeSize(dtype)) % 16 == 0;
  for (int o = 0; o < a.num_outputs; ++o) {
    const ExpertWeightTable& t = a.weights[o];
    if (t.num_experts != E || t.dtype != dtype || t.n != N || t.k != K)
      return Status::InvalidArgument(
          "GroupedMatMul: output " + std::to_string(o) +
          "'s weights differ from output 0's in experts, dtype or shape");
    if (t.entries == nullptr || a.y[o] == nullptr)
      return Status::InvalidArgument("GroupedMatMul: null weight table or output");
    vec_w = vec_w && t.aligned16;
  }
  const int64_t xs = a.x_stride ? a.x_stride : K, ys = a.y_stride ? a.y_stride : N;
  if (a.max_rows < 0 || xs < K || ys < N)
    return Status::InvalidArgument("GroupedMatMul: bad row bound or stride");
  if (a.max_rows == 0 || N == 0) return Status::Ok();
  if (a.offsets == nullptr || a.x == nullptr)
    return Status::InvalidArgument("GroupedMatMul: null pointer");
  const bool vec_x = K % 4 == 0 && Aligned16(a.x) && xs % 4 == 0;
  // Each item has 1 .. 8 rows of one expert: at most max_rows, and at most ceil(rows / 8) + 1
  // per expert, so ceil(max_rows / 8) + E, per output.
  const int64_t max_items =
      a.num_outputs *
      std::min<int64_t>(a.max_rows, (a.max_rows + kRowsPerItem - 1) / kRowsPerItem + E);
  if (max_items > 0x7FFFFFFF) return Status::InvalidArgument("GroupedMatMul: too many rows");
  // scratch: descriptors [outputs * E], items [max_items], the count.
  const size_t desc_bytes = (size_t{2} * E * sizeof(ProblemDesc) + 15) / 16 * 16;
  const size_t item_bytes = (static_cast<size_t>(max_items) * sizeof(WorkItem) + 15) / 16 * 16;
  RETURN_IF_ERROR(scratch.Reserve(static_cast<int64_t>(desc_bytes + item_bytes + 16),
                                  "GroupedMatMul descriptors"));
  auto* base = scratch.as<uint8_t>();
  GroupedBuild g{.offsets = a.offsets,
                 .num_experts = E,
                 .num_outputs = a.num_outputs,
                 .w = {static_cast<const ExpertWeightDesc*>(a.weights[0].entries),
                       static_cast<const ExpertWeightDesc*>(a.weights[a.num_outputs - 1].entries)},
                 .x = a.x,
                 .x_stride = xs,
                 .y = {a.y[0], a.y[a.num_outputs - 1]},
                 .y_stride = ys,
                 .max_rows = a.max_rows,
                 .max_items = max_items,
                 .problems = reinterpret_cast<ProblemDesc*>(base),
                 .items = reinterpret_cast<WorkItem*>(base + desc_bytes),
                 .num_items = reinterpret_cast<int32_t*>(base + desc_bytes + item_bytes)};
  BuildGroupedItems<<<1, kBuildThreads, (E + 1) * sizeof(int32_t), stream>>>(g);
  RETURN_IF_ERROR(LastLaunch("GroupedMatMul (work items)"));
  Shape s{.n = N,
          .k = K,
          .scale_cols = (K + kFp8BlockSize - 1) / kFp8BlockSize,
          .num_items = max_items,
          .num_groups = 0,
          .accumulate = a.options.accumulate,
          .single = {},
          .single_rows = 0,
          .device_num_items = g.num_items};
  const int rows = static_cast<int>(std::min<int64_t>(kRowsPerItem, a.max_rows));
  RETURN_IF_ERROR(LaunchItems(dtype, vec_w, vec_x, rows, g.problems, g.items, s, stream));
  return LastLaunch("GroupedMatMul");
}

Status MatMulT(const MatMulTArgs& args, cudaStream_t stream) {
  const WeightView& w = args.w;
  if (!HasKernel(w.dtype)) return Unsupported("MatMulT", w.dtype);
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
    case DType::kF8E4M3:
      MatMulTKernel<DType::kF8E4M3><<<grid, kTCols, 0, stream>>>(args, s);
      break;
    case DType::kI8Packed:
    case DType::kF4E2M1:
    case DType::kF8E8M0:
    case DType::kI8:
    case DType::kI32:
    case DType::kI64:
      return Unsupported("MatMulT", w.dtype);
  }
  return LastLaunch("MatMulT");
}

}  // namespace epserve::cuda
