// The CUDA kernels of the forward pass, callable from host code. Each mirrors a CPU kernel of
// src/kernels (its twin, named beside it) on device buffers; src/cuda/*_test.cc compare every
// op with its twin on the same random inputs and state the tolerance.
// Conventions: every pointer is device memory unless named host_*; weights are WeightViews whose
// data/scale point to device memory (same layout as on the host: row-major [rows, cols], FP8
// e4m3 with 128x128 fp32 block scales, scale_row_offset for row slices); activations are fp32.
// Launches go to `stream` and are asynchronous; each returns the launch's Status (a bad
// configuration, no kernel image for this GPU), never aborts. Nothing allocates except where a
// `scratch` buffer is named. Results do not depend on how work is split over blocks.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"
#include "cuda/device.h"
#include "kernels/gate.h"
#include "tensor/weight_view.h"

namespace epserve::cuda {

// ---- matmul.cu -------------------------------------------------------------------------------
// One problem of y[M, N] (+)= x[M, K] * W^T, W [N, K] (twin: kernels::MatMulReference).
struct MatMulProblem {
  const float* x = nullptr;
  int64_t x_stride = 0;  // floats between rows of x; 0 means K
  int64_t num_rows = 0;  // M (0 is allowed: nothing to do)
  WeightView w;          // [N, K], F32, BF16 or FP8 (device pointers)
  float* y = nullptr;
  int64_t y_stride = 0;  // floats between rows of y; 0 means N
};
struct MatMulOptions {
  bool accumulate = false;  // y += instead of y =
};
// Runs `num_problems` independent problems (host array of descriptors) in one launch: the
// per-head W_uv products, a layer's experts over their expert-major rows, or a single MatMul.
// Every problem must have the same N and K and dtype. The descriptors are copied to the device
// through `scratch` (grown as needed), so the host array may be reused once this returns; when
// only one problem has rows, nothing is copied (it travels in the launch's parameters).
// Each output is one warp's f32 dot product over K (weights dequantized in registers).
Status MatMul(const MatMulProblem* host_problems, int num_problems, const MatMulOptions& options,
              DeviceBuffer& scratch, cudaStream_t stream);

// One matrix (gate, up or down) of every expert of a MoE layer, as a table in device memory
// for GroupedMatMul: entry e is expert e's [n, k] weight. Made once (MakeExpertWeightTable);
// the host keeps the shape, dtype and alignment, the device the pointers.
struct ExpertWeightTable {
  const void* entries = nullptr;  // device array of num_experts descriptors (matmul.cu's)
  int num_experts = 0;
  DType dtype = DType::kF32;
  int64_t n = 0, k = 0;
  bool aligned16 = true;  // every expert's data starts 16-byte aligned
};
// Uploads the descriptors of `num_experts` device views (all the same dtype and shape) into
// `storage` (allocated; blocks until copied) and describes them in *table.
Status MakeExpertWeightTable(const WeightView* views, int num_experts, DeviceBuffer& storage,
                             ExpertWeightTable* table);
// The experts of a MoE layer over expert-major rows, with the problem list made on the device:
// for each expert e and each output o < num_outputs, rows [offsets[e], offsets[e + 1]) of x
// times weights[o]'s entry e into the same rows of y[o] (so gate and up go in one launch).
// A one-block kernel writes the problem descriptors, the work items (expert e's rows in items
// of up to 8) and their count into `scratch` (grown as needed, host bound on the size); the
// MatMul kernel then runs over a grid sized by the bound and its blocks past the device count
// return at once. Nothing is copied between host and device; each row's result is bit-identical
// to a MatMul over the same row (same kernel, same summation order).
// REQUIRES: offsets[num_experts] <= max_rows; weights[o] share num_experts, dtype, n and k.
struct GroupedMatMulArgs {
  const int64_t* offsets = nullptr;  // [num_experts + 1], device (ExpertLayout's)
  int64_t max_rows = 0;              // host bound on offsets[num_experts] (T * top_k)
  const float* x = nullptr;          // [rows, k]
  int64_t x_stride = 0;              // 0 means k
  int num_outputs = 1;               // 1 or 2
  ExpertWeightTable weights[2];
  float* y[2] = {nullptr, nullptr};  // [rows, n] each
  int64_t y_stride = 0;              // 0 means n
  MatMulOptions options;
};
Status GroupedMatMul(const GroupedMatMulArgs& args, DeviceBuffer& scratch, cudaStream_t stream);

// The absorbed query product of MLA (twin: kernels::MatMulTReference): for each head h,
//   y[t, h, :] = x[t, h, :] * W_h,   W_h = w.RowSlice(h * w_head_row_stride, N) of shape [N, K]
// with x [T, heads, N] at stride x_head_stride between heads and x_token_stride between tokens,
// y [T, heads, K] likewise.
struct MatMulTArgs {
  const float* x = nullptr;
  int64_t x_token_stride = 0, x_head_stride = 0;
  int64_t num_tokens = 0;
  int num_heads = 0;
  WeightView w;                   // the whole tensor (device pointers); rows of head h below
  int64_t w_head_row_stride = 0;  // head h's N rows start at row h * this
  int64_t n = 0;                  // rows per head (qk_nope_head_dim)
  float* y = nullptr;
  int64_t y_token_stride = 0, y_head_stride = 0;
};
Status MatMulT(const MatMulTArgs& args, cudaStream_t stream);

// ---- moe_layout.cu ---------------------------------------------------------------------------
// The expert-major layout of num_pairs (token, slot) pairs on the device (twin:
// LayoutExpertMajor, equal as sets): offsets [num_experts + 1] (exclusive scan of the counts per
// expert; offsets[e + 1] - offsets[e] is expert e's count) and pair_row [num_pairs], each pair's
// packed row: expert e's pairs fill rows [offsets[e], offsets[e + 1]) in an unspecified order
// (LayoutExpertMajor keeps pair order). Pairs whose id is outside [0, num_experts) get row -1
// and are not counted (GatherRows and Combine skip them). One launch, no host copy.
// REQUIRES: num_experts <= kMaxLayoutExperts, num_pairs < 2^31.
inline constexpr int kMaxLayoutExperts = 8192;
Status ExpertLayout(const int32_t* expert_ids, int64_t num_pairs, int num_experts, int64_t* offsets,
                    int64_t* pair_row, cudaStream_t stream);

// ---- mla_attention.cu ------------------------------------------------------------------------
// MLA absorbed attention over the paged latent cache (twin: kernels::MlaAttentionReference):
//   score(h, s) = scale * (q_abs[t,h] . c_kv[s] + q_pe[t,h] . k_pe[s]),  s = 0 .. pos[t]
//   out[t, h]   = sum_s softmax(score(h, .))[s] * c_kv[s]
// Token t's sequence has block table tables[table_offset[t] ...]; position s lives in block
// tables[table_offset[t] + s / block_size], row s % block_size, at
// cache + block * block_stride + row * (L + R) elements (f32 or bf16 per cache_bf16).
struct MlaAttentionArgs {
  int64_t num_tokens = 0;
  int num_heads = 0;
  int kv_lora_rank = 0;          // L (a multiple of 32)
  int rope_dim = 0;              // R (<= 64)
  const float* q_abs = nullptr;  // [T, heads, L]
  const float* q_pe = nullptr;   // [T, heads, R] (RoPE applied)
  const void* cache = nullptr;   // this layer's rows: block b at cache + b * block_stride
  int64_t block_stride = 0;      // elements
  int64_t block_size = 0;
  bool cache_bf16 = false;
  const int32_t* tables = nullptr;        // all tokens' block tables, concatenated
  const int64_t* table_offset = nullptr;  // [T]
  const int64_t* token_pos = nullptr;     // [T]
  float softmax_scale = 1.0f;
  float* out = nullptr;  // [T, heads, L]
};
Status MlaAttention(const MlaAttentionArgs& args, cudaStream_t stream);

// ---- gate.cu ---------------------------------------------------------------------------------
// Top-k routing per token (twin: kernels::GateTopK, the same rule and tie order: lower id).
// logits [T, num_experts], bias [num_experts] or null; writes ids and weights [T, top_k].
// REQUIRES: num_experts <= 256.
Status GateTopK(const kernels::GateOptions& options, const float* logits, const float* bias,
                int64_t num_tokens, int32_t* expert_ids, float* weights, cudaStream_t stream);

// ---- elementwise.cu --------------------------------------------------------------------------
// out[r] = rmsnorm(x[r]) * weight for rows r < rows of n values (twin: kernels::RmsNormReference).
// x and out rows at their strides (0 means n); out may equal x.
struct RmsNormArgs {
  const float* x = nullptr;
  int64_t x_stride = 0;
  int64_t rows = 0, n = 0;
  const float* weight = nullptr;
  float eps = 1e-6f;
  float* out = nullptr;
  int64_t out_stride = 0;
};
Status RmsNorm(const RmsNormArgs& args, cudaStream_t stream);
// out[i] = silu(gate[i]) * up[i] (twin: kernels::SiluMulReference). out may equal gate.
Status SiluMul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream);
// y[i] += x[i].
Status Add(const float* x, int64_t n, float* y, cudaStream_t stream);
// Rotates adjacent pairs of the rope_dim values at x + r * row_stride for each row r < rows,
// with the cos/sin row of position positions[r / rows_per_position] of table [*, rope_dim]
// (twin: kernels::ApplyRopeReference with RopeTable::Row).
struct RopeArgs {
  float* x = nullptr;
  int64_t rows = 0, row_stride = 0;
  int64_t rows_per_position = 1;  // heads per token for q_pe
  const int64_t* positions = nullptr;
  const float* table = nullptr;
  int rope_dim = 0;
};
Status Rope(const RopeArgs& args, cudaStream_t stream);
// out[t] = dequantized row tokens[t] of `embed` [vocab, H] (twin: kernels::DequantizeRow).
Status EmbedRows(const WeightView& embed, const int32_t* tokens, int64_t num_tokens, float* out,
                 cudaStream_t stream);
// Writes row t of rows [T, width] to the cache (f32, or bf16 rounded to nearest even as
// KvBlocks::WriteRow): block token_block[t], row token_pos[t] % block_size, at
// cache + block * block_stride + row * width.
struct KvWriteArgs {
  const float* rows = nullptr;
  int64_t num_tokens = 0;
  int width = 0;
  const int32_t* token_block = nullptr;
  const int64_t* token_pos = nullptr;
  void* cache = nullptr;
  int64_t block_stride = 0, block_size = 0;
  bool cache_bf16 = false;
};
Status KvWrite(const KvWriteArgs& args, cudaStream_t stream);
// packed[pair_row[i]] = x[i / top_k] for pairs i < num_pairs with pair_row[i] >= 0 (rows of H).
Status GatherRows(const float* x, const int64_t* pair_row, int64_t num_pairs, int top_k, int64_t h,
                  float* packed, cudaStream_t stream);
// out[t] += sum_k weights[t, k] * packed[pair_row[t * top_k + k]], k in order (twin: the loop of
// LocalExperts::Finish).
Status Combine(const float* packed, const int64_t* pair_row, const float* weights,
               int64_t num_tokens, int top_k, int64_t h, float* out, cudaStream_t stream);

}  // namespace epserve::cuda
