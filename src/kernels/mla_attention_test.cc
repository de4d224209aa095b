#include "kernels/mla_attention.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace epserve::kernels {
namespace {

TEST(MlaAttentionTest, MatchesReferenceForMixedSequences) {
  const int H = 3, L = 40, R = 8;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist;
  std::vector<float> cache_a(10 * (L + R)), cache_b(33 * (L + R));
  for (auto& v : cache_a) v = dist(rng);
  for (auto& v : cache_b) v = dist(rng);
  // Tokens: one decode token of seq a at pos 9, three prefill tokens of seq b at 30..32.
  std::vector<const float*> caches = {cache_a.data(), cache_b.data(), cache_b.data(), cache_b.data()};
  std::vector<int64_t> pos = {9, 30, 31, 32};
  const int64_t T = 4;
  std::vector<float> qa(T * H * L), qp(T * H * R), out(T * H * L), ref(T * H * L);
  for (auto& v : qa) v = dist(rng);
  for (auto& v : qp) v = dist(rng);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    std::vector<float> scratch(threads * 33);
    MlaAttentionArgs args{.num_tokens = T, .num_heads = H, .kv_lora_rank = L, .rope_dim = R, .q_abs = qa.data(),
                          .q_pe = qp.data(), .token_cache = caches.data(), .token_pos = pos.data(),
                          .softmax_scale = 0.2f, .out = out.data(), .scratch = scratch.data(), .scratch_per_thread = 33};
    MlaAttention(args, pool);
    args.out = ref.data();
    MlaAttentionReference(args);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-5) << i;
  }
}

}  // namespace
}  // namespace epserve::kernels
