// The fast path of MatMul (Compute::kFast) on Intel AMX (docs/kernels.md, "Compute modes").
//
// Numerics: every activation and every weight (FP8 times its block scale, F32) is rounded to
// bfloat16 (round to nearest even; f32 denormals read as zero, as the hardware does), the
// products of those are exact in f32, and they are summed in f32 by the tile unit (TDPBF16PS)
// in a fixed order over K. BF16 weights are used as they are. So one output's error against the
// exact product is at most about 2 * 2^-9 of the sum of |x * w| (both operands rounded) plus the
// f32 summation error; MatMulFastReference is the scalar twin.
//
// Layout: weight rows are the tiles' A operand (16 rows x 32 k as bf16, converted once per
// 32-row panel into a per-thread buffer), the activations the B operand (pairs of k
// interleaved across 16 rows of x, packed once per call), so C tiles hold y^T [n][m]. Each y
// element is accumulated over all of K in one tile, so results are bit-identical for any split
// of the rows over threads and any number of other rows of x in the call (the EP tests rely on
// that), as on the exact path.
//
// Scratch: two per-thread buffers that grow to the largest problem the thread has seen
// (32 x K bf16 weights, and M x K bf16 activations rounded up to 16 x 32), the one allocation
// of the kernels outside the callers' buffers.
#pragma once

#include <cstdint>

#include "kernels/matmul.h"

namespace epserve::kernels {

// Whether FastMatMulRows can run in this process: an x86-64 CPU with AMX-TILE, AMX-BF16,
// AVX512-BF16 and AVX512-VBMI, tile state enabled by the OS, and this process allowed to use it
// (Linux arch_prctl(ARCH_REQ_XCOMP_PERM), asked once). False when EPSERVE_NO_AMX is set in the
// environment (to test the fallback). Cheap after the first call; thread-safe.
bool FastMatMulAvailable();

// Rows [n_begin, n_end) of y = x W^T (strides resolved) on the tile unit.
// REQUIRES: FastMatMulAvailable().
void FastMatMulRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end);

}  // namespace epserve::kernels
