#include "kernels/mla_attention.h"

#include <cmath>
#include <vector>

#include "base/check.h"

namespace epserve::kernels {

namespace {
inline float Dot(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}
}  // namespace

void MlaAttention(const MlaAttentionArgs& a, ThreadPool& pool) {
  const int H = a.num_heads, L = a.kv_lora_rank, R = a.rope_dim;
  const int64_t row = L + R;
  pool.ParallelFor(a.num_tokens * H, 1, [&](size_t b, size_t e, int thread_idx) {
    float* scores = a.scratch + thread_idx * a.scratch_per_thread;
    for (size_t item = b; item < e; ++item) {
      const int64_t t = item / H;
      const int h = item % H;
      const float* qa = a.q_abs + (t * H + h) * L;
      const float* qp = a.q_pe + (t * H + h) * R;
      const float* cache = a.token_cache[t];
      const int64_t n = a.token_pos[t] + 1;
      DCHECK(n <= a.scratch_per_thread);
      float mx = -INFINITY;
      for (int64_t s = 0; s < n; ++s) {
        const float* c = cache + s * row;
        scores[s] = (Dot(qa, c, L) + Dot(qp, c + L, R)) * a.softmax_scale;
        mx = std::fmax(mx, scores[s]);
      }
      float sum = 0.0f;
      for (int64_t s = 0; s < n; ++s) {
        scores[s] = std::exp(scores[s] - mx);
        sum += scores[s];
      }
      const float inv = 1.0f / sum;
      float* o = a.out + (t * H + h) * L;
      for (int i = 0; i < L; ++i) o[i] = 0.0f;
      for (int64_t s = 0; s < n; ++s) {
        const float p = scores[s] * inv;
        const float* c = cache + s * row;
        for (int i = 0; i < L; ++i) o[i] += p * c[i];
      }
    }
  });
}

void MlaAttentionReference(const MlaAttentionArgs& a) {
  const int H = a.num_heads, L = a.kv_lora_rank, R = a.rope_dim;
  const int64_t row = L + R;
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    for (int h = 0; h < H; ++h) {
      const float* qa = a.q_abs + (t * H + h) * L;
      const float* qp = a.q_pe + (t * H + h) * R;
      const int64_t n = a.token_pos[t] + 1;
      std::vector<double> p(n);
      double mx = -INFINITY;
      for (int64_t s = 0; s < n; ++s) {
        const float* c = a.token_cache[t] + s * row;
        double d = 0.0;
        for (int i = 0; i < L; ++i) d += static_cast<double>(qa[i]) * c[i];
        for (int i = 0; i < R; ++i) d += static_cast<double>(qp[i]) * c[L + i];
        p[s] = d * a.softmax_scale;
        mx = std::max(mx, p[s]);
      }
      double sum = 0.0;
      for (auto& v : p) sum += (v = std::exp(v - mx));
      for (int i = 0; i < L; ++i) {
        double o = 0.0;
        for (int64_t s = 0; s < n; ++s) o += p[s] / sum * a.token_cache[t][s * row + i];
        a.out[(t * H + h) * L + i] = static_cast<float>(o);
      }
    }
  }
}

}  // namespace epserve::kernels
