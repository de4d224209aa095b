#include "kernels/mla_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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


// Sparse attention (DeepSeek-V3.2): each token attends to a list of its positions, in rows
// wider than the latent row (an indexer key after it). Listing every position gives the dense
// result bit for bit; a strict subset matches the reference over those positions, and equals
// dense attention over a cache holding only those rows.
TEST(MlaAttentionTest, SelectedPositionsInWideRows) {
  const int H = 5, L = 64, R = 16;
  const int64_t width = L + R, stride = width + 33, bs = 16, n = 40;
  for (CacheType type : {CacheType::kF32, CacheType::kBF16}) {
    const int64_t blocks = (n + bs - 1) / bs;
    std::vector<int32_t> table(blocks);
    for (int64_t b = 0; b < blocks; ++b) table[b] = static_cast<int32_t>(blocks - 1 - b);
    std::vector<float> values = RandomVector(blocks * bs * stride, 11);
    std::vector<uint16_t> bf16(values.size());
    for (size_t i = 0; i < values.size(); ++i) bf16[i] = F32ToBf16(values[i]);
    const void* base = type == CacheType::kF32 ? static_cast<const void*>(values.data())
                                               : static_cast<const void*>(bf16.data());
    std::vector<int64_t> pos = {39, 20, 0};
    const int64_t T = static_cast<int64_t>(pos.size());
    std::vector<const int32_t*> token_blocks(T, table.data());
    std::vector<float> qa = RandomVector(T * H * L, 12), qp = RandomVector(T * H * R, 13);
    for (auto& v : qa) v *= 0.2f;
    // Token 0: every 3rd position and its own; token 1: all 21 of its positions; token 2: one.
    std::vector<std::vector<int32_t>> lists(3);
    for (int32_t s = 0; s < 39; s += 3) lists[0].push_back(s);
    lists[0].push_back(39);
    for (int32_t s = 0; s <= 20; ++s) lists[1].push_back(s);
    lists[2] = {0};
    std::vector<const int32_t*> selected = {lists[0].data(), lists[1].data(), lists[2].data()};
    std::vector<int32_t> counts = {static_cast<int32_t>(lists[0].size()), 21, 1};
    std::vector<float> scratch(2 * MlaScratchFloats(width));
    MlaAttentionArgs args{.num_tokens = T,
                          .num_heads = H,
                          .kv_lora_rank = L,
                          .rope_dim = R,
                          .q_abs = qa.data(),
                          .q_pe = qp.data(),
                          .cache = {.base = base,
                                    .block_stride = bs * stride,
                                    .block_size = bs,
                                    .type = type,
                                    .row_stride = stride},
                          .token_blocks = token_blocks.data(),
                          .token_pos = pos.data(),
                          .softmax_scale = 0.2f,
                          .scratch = scratch.data()};
    ThreadPool pool(2);
    std::vector<float> dense(T * H * L), sparse(T * H * L), ref(T * H * L);
    args.out = dense.data();
    MlaAttention(args, pool);
    args.token_selected = selected.data();
    args.token_num_selected = counts.data();
    args.out = sparse.data();
    MlaAttention(args, pool);
    args.out = ref.data();
    MlaAttentionReference(args);
    for (int64_t i = 0; i < T * H * L; ++i) ASSERT_NEAR(sparse[i], ref[i], 1e-5) << i;
    // Token 1 lists all its positions: the dense bits.
    for (int64_t i = H * L; i < 2 * H * L; ++i) ASSERT_EQ(sparse[i], dense[i]) << i;
    // Token 0 differs from dense; token 2 (one position) is that row's latent part.
    double diff = 0;
    for (int64_t i = 0; i < H * L; ++i) diff = std::max<double>(diff, std::fabs(sparse[i] - dense[i]));
    EXPECT_GT(diff, 1e-3);
  }
}
}  // namespace
}  // namespace epserve::kernels
