#include "kernels/mla_attention.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/test_util.h"

namespace epserve::kernels {
namespace {

using testing::ForEachTarget;
using testing::RandomVector;

struct Case {
  int heads, L, R;
};

// Decode and prefill tokens of sequences of different lengths (tile tails, one-position
// sequences), head counts that split into uneven groups across threads, widths with and
// without vector tails.
TEST(MlaAttentionTest, MatchesReferenceForMixedSequences) {
  for (Case c : {Case{3, 40, 8}, Case{16, 512, 64}, Case{9, 64, 16}}) {
    const int H = c.heads, L = c.L, R = c.R;
    std::vector<float> cache_a = RandomVector(10 * (L + R), 1),
                       cache_b = RandomVector(40 * (L + R), 2);
    std::vector<float> cache_c = RandomVector(1 * (L + R), 3);
    // Tokens: seq a at pos 9; seq b at 30..32 (prefill) and 39; seq c at pos 0.
    std::vector<const float*> caches = {cache_a.data(), cache_b.data(), cache_b.data(),
                                        cache_b.data(), cache_b.data(), cache_c.data()};
    std::vector<int64_t> pos = {9, 30, 31, 32, 39, 0};
    const int64_t T = static_cast<int64_t>(pos.size());
    std::vector<float> qa = RandomVector(T * H * L, 4), qp = RandomVector(T * H * R, 5),
                       ref(T * H * L);
    for (auto& v : qa) v *= 0.2f;
    MlaAttentionArgs args{.num_tokens = T,
                          .num_heads = H,
                          .kv_lora_rank = L,
                          .rope_dim = R,
                          .q_abs = qa.data(),
                          .q_pe = qp.data(),
                          .token_cache = caches.data(),
                          .token_pos = pos.data(),
                          .softmax_scale = 0.2f,
                          .out = ref.data()};
    MlaAttentionReference(args);
    ForEachTarget([&] {
      std::vector<float> first;
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<float> out(T * H * L);
        args.out = out.data();
        MlaAttention(args, pool);
        for (size_t i = 0; i < out.size(); ++i)
          ASSERT_NEAR(out[i], ref[i], 1e-5) << H << " heads @" << i;
        if (first.empty()) first = out;
        ASSERT_EQ(out, first) << threads << " threads";
      }
    });
  }
}

}  // namespace
}  // namespace epserve::kernels
