// The fast path of MatMul (Compute::kFast) (docs/kernels.md, "Compute modes"), with two
// kernels: Intel AMX tiles (matmul_fast.cc) and AVX512-BF16 dot products (matmul_dot.cc, for
// CPUs with VDPBF16PS but no tile unit: AMD Zen 4/5, Intel Cooper Lake). The best one the CPU
// has runs; both have the same numerics and the same scalar twin.
//
// Numerics: every activation and every weight (FP8 times its block scale, F32) is rounded to
// bfloat16 (round to nearest even; f32 denormals read as zero, as the hardware does), the
// products of those are exact in f32, and they are summed in f32 (TDPBF16PS, VDPBF16PS) in a
// fixed order over K for each kernel. BF16 weights are used as they are. So one output's error
// against the exact product is at most about 2 * 2^-9 of the sum of |x * w| (both operands
// rounded) plus the f32 summation error; MatMulReference with Compute::kFast is the scalar
// twin. The two kernels sum in different orders, so they agree to f32 rounding, not bit for bit.
//
// AMX layout: weight rows are the tiles' A operand (16 rows x 32 k as bf16, converted once per
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

enum class FastKernel : uint8_t { kNone, kAvx512Bf16, kAmx };

// The fast kernel this process runs, chosen once (cheap after the first call; thread-safe):
//   kAmx: an x86-64 CPU with AMX-TILE, AMX-BF16, AVX512-BF16 and AVX512-VBMI, tile state
//     enabled by the OS, and this process allowed to use it (Linux
//     arch_prctl(ARCH_REQ_XCOMP_PERM), asked once); not when EPSERVE_NO_AMX is set;
//   kAvx512Bf16: else an x86-64 CPU with AVX512-F/DQ/BW/VL/VBMI and AVX512-BF16; not when
//     EPSERVE_NO_BF16_DOT is set;
//   kNone: else (MatMul then runs kFast as kExact). The variables exist to test each kernel
//     and the fallback on one machine.
FastKernel FastMatMulKernel();
inline bool FastMatMulAvailable() { return FastMatMulKernel() != FastKernel::kNone; }
const char* FastKernelName(FastKernel kernel);  // "amx", "avx512-bf16", "none"

// Rows [n_begin, n_end) of y = x W^T (strides resolved) on the fast kernel.
// REQUIRES: FastMatMulAvailable().
void FastMatMulRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end);

// The kernels themselves, whatever FastMatMulKernel() chose (for tests and benchmarks):
// whether the CPU (and OS) can run each, and the rows of y on it.
bool AmxMatMulSupported();
void AmxMatMulRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end);
bool DotMatMulSupported();
void DotMatMulRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end);

}  // namespace epserve::kernels
