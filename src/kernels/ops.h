// Small element-wise and row-wise kernels. All take raw pointers and sizes, allocate nothing
// and are deterministic. RmsNorm, SiluMul, Axpy and ApplyRope are vectorized (Highway, one
// dispatch per call); the *Reference functions are their scalar twins for tests.
#pragma once

#include <cstdint>

namespace epserve::kernels {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i], i < n. out may equal x.
void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out);

// out[i] = silu(gate[i]) * up[i] with silu(v) = v / (1 + exp(-v)). out may alias gate.
void SiluMul(const float* gate, const float* up, int64_t n, float* out);

// In-place softmax over n values.
void Softmax(float* x, int64_t n);

// Rotates adjacent pairs (x[2i], x[2i+1]) of a rope_dim-wide vector by the angle whose
// cos/sin are cos_sin[2i], cos_sin[2i+1] (a table row for one position; see RopeTable).
void ApplyRope(float* x, const float* cos_sin, int64_t rope_dim);

// y[i] += scale * x[i].
void Axpy(float scale, const float* x, int64_t n, float* y);

// Whether x[0, n) holds no NaN or infinity. One branch-free pass over the bits (the compiler
// vectorizes it), so it is cheap enough to run on every layer's output of every step.
bool AllFinite(const float* x, int64_t n);
// The index of the first NaN or infinity in x[0, n), or n when there is none.
int64_t FirstNonFinite(const float* x, int64_t n);

// Scalar twins (RmsNorm accumulates in double).
void RmsNormReference(const float* x, const float* weight, int64_t n, float eps, float* out);
void SiluMulReference(const float* gate, const float* up, int64_t n, float* out);
void ApplyRopeReference(float* x, const float* cos_sin, int64_t rope_dim);

}  // namespace epserve::kernels
