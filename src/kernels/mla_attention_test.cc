#include "kernels/mla_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kernels/test_util.h"
#include "tensor/dtype.h"

namespace epserve::kernels {
namespace {

using testing::ForEachTarget;
using testing::RandomVector;

struct Case {
  int heads, L, R;
  int64_t block_size;
};

// Decode and prefill tokens of sequences of different lengths (tile tails, one-position
// sequences), head counts that split into uneven groups across threads, widths with and
// without vector tails; the sequences' blocks are scattered over a shared pool in shuffled
// order, in float32 and bfloat16, with blocks smaller than, equal to and larger than a tile.
TEST(MlaAttentionTest, MatchesReferenceForMixedSequencesInPagedBlocks) {
  for (Case c :
       {Case{3, 40, 8, 16}, Case{16, 512, 64, 64}, Case{9, 64, 16, 8}, Case{4, 128, 16, 48}}) {
    for (CacheType type : {CacheType::kF32, CacheType::kBF16}) {
      const int H = c.heads, L = c.L, R = c.R;
      const int64_t row = L + R, bs = c.block_size;
      // Sequences a (10 positions), b (40), c (1): blocks drawn from a shuffled pool.
      const int64_t lens[3] = {10, 40, 1};
      int64_t num_blocks = 0;
      for (int64_t n : lens) num_blocks += (n + bs - 1) / bs;
      num_blocks += 3;  // unused blocks in between
      std::vector<int32_t> order(num_blocks);
      for (int32_t i = 0; i < num_blocks; ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), std::mt19937(7));
      std::vector<std::vector<int32_t>> tables(3);
      size_t next = 0;
      for (int s = 0; s < 3; ++s)
        for (int64_t b = 0; b < (lens[s] + bs - 1) / bs; ++b) tables[s].push_back(order[next++]);
      std::vector<float> values = RandomVector(num_blocks * bs * row, 1);
      std::vector<uint16_t> bf16(values.size());
      for (size_t i = 0; i < values.size(); ++i) bf16[i] = F32ToBf16(values[i]);
      // Tokens: seq a at pos 9; seq b at 30..32 (prefill) and 39; seq c at pos 0.
      std::vector<const int32_t*> token_blocks = {tables[0].data(), tables[1].data(),
                                                  tables[1].data(), tables[1].data(),
                                                  tables[1].data(), tables[2].data()};
      std::vector<int64_t> pos = {9, 30, 31, 32, 39, 0};
      const int64_t T = static_cast<int64_t>(pos.size());
      std::vector<float> qa = RandomVector(T * H * L, 4), qp = RandomVector(T * H * R, 5),
                         ref(T * H * L);
      for (auto& v : qa) v *= 0.2f;
      std::vector<float> scratch(3 * MlaScratchFloats(row));
      MlaAttentionArgs args{
          .num_tokens = T,
          .num_heads = H,
          .kv_lora_rank = L,
          .rope_dim = R,
          .q_abs = qa.data(),
          .q_pe = qp.data(),
          .cache = {.base = type == CacheType::kF32 ? static_cast<const void*>(values.data())
                                                    : static_cast<const void*>(bf16.data()),
                    .block_stride = bs * row,
                    .block_size = bs,
                    .type = type},
          .token_blocks = token_blocks.data(),
          .token_pos = pos.data(),
          .softmax_scale = 0.2f,
          .out = ref.data(),
          .scratch = scratch.data()};
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
}

}  // namespace
}  // namespace epserve::kernels
