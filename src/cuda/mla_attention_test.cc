// cuda::MlaAttention against kernels::MlaAttentionReference on a random paged latent cache
// (f32 and bf16 rows, shuffled block ids, block sizes 16 and 64): decode tokens of sequences of
// different lengths, a causal prefill of all 33 positions of one sequence, and V3's shapes.
#include "kernels/mla_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "cuda/ops.h"
#include "cuda/test_util.h"
#include "tensor/dtype.h"

namespace epserve::cuda {
namespace {

using testing::RandomFloats;
using testing::ToDevice;
using testing::ToHost;

// The GPU keeps f32 everywhere (dot products of L + R terms, online softmax with expf, the
// warps' merge) where the twin accumulates in double. Each score then carries a relative error
// of a few 2^-24 times the sum of |terms| (about 1e-6 absolute for these unit-variance inputs
// and scale 1/sqrt(L + R)); a score error e changes the softmax weights by a factor e^e, so
// every output moves by about e times the magnitude of the rows it averages (~ max|ref|), plus
// f32 rounding of the weighted sums over up to 1000 positions (~1e-6 relative). 2e-5 of
// max|ref| leaves a factor of several over that.
constexpr double kTol = 2e-5;

struct Shape {
  int heads, latent, rope;
  int64_t block_size;
  bool bf16;
};

// A token: its sequence and its position (attends to 0 .. pos).
struct Token {
  int seq;
  int64_t pos;
};

void RunCase(const Shape& sh, const std::vector<int64_t>& seq_lens,
             const std::vector<Token>& tokens, uint64_t seed) {
  const int H = sh.heads, L = sh.latent, R = sh.rope;
  const int64_t row = L + R, bs = sh.block_size;
  const int64_t block_stride = bs * row + 32;  // padding: the stride is honoured
  // Block tables: every sequence's blocks drawn from a shuffled pool, plus unused spares.
  int64_t num_blocks = 3;
  for (int64_t len : seq_lens) num_blocks += (len + bs - 1) / bs;
  std::vector<int32_t> pool(num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<int32_t> tables;
  std::vector<int64_t> seq_offset;
  size_t next = 0;
  for (int64_t len : seq_lens) {
    seq_offset.push_back(static_cast<int64_t>(tables.size()));
    for (int64_t b = 0; b < (len + bs - 1) / bs; ++b) tables.push_back(pool[next++]);
  }

  const std::vector<float> rows = RandomFloats(num_blocks * block_stride, seed + 1);
  std::vector<uint16_t> rows_bf16(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) rows_bf16[i] = F32ToBf16(rows[i]);
  const void* host_cache =
      sh.bf16 ? static_cast<const void*>(rows_bf16.data()) : static_cast<const void*>(rows.data());
  const size_t cache_bytes = rows.size() * (sh.bf16 ? 2 : 4);

  const auto T = static_cast<int64_t>(tokens.size());
  const std::vector<float> q_abs = RandomFloats(T * H * L, seed + 2);
  const std::vector<float> q_pe = RandomFloats(T * H * R, seed + 3);
  std::vector<int64_t> table_offset, token_pos;
  std::vector<const int32_t*> token_blocks;
  for (const Token& tok : tokens) {
    ASSERT_LT(tok.pos, seq_lens[tok.seq]);
    table_offset.push_back(seq_offset[tok.seq]);
    token_pos.push_back(tok.pos);
    token_blocks.push_back(tables.data() + seq_offset[tok.seq]);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(row));

  std::vector<float> want(T * H * L);
  kernels::MlaAttentionArgs ref;
  ref.num_tokens = T;
  ref.num_heads = H;
  ref.kv_lora_rank = L;
  ref.rope_dim = R;
  ref.q_abs = q_abs.data();
  ref.q_pe = q_pe.data();
  ref.cache = {.base = host_cache,
               .block_stride = block_stride,
               .block_size = bs,
               .type = sh.bf16 ? kernels::CacheType::kBF16 : kernels::CacheType::kF32};
  ref.token_blocks = token_blocks.data();
  ref.token_pos = token_pos.data();
  ref.softmax_scale = scale;
  ref.out = want.data();
  kernels::MlaAttentionReference(ref);

  DeviceBuffer d_qa = ToDevice(q_abs), d_qp = ToDevice(q_pe);
  DeviceBuffer d_cache = ToDevice(host_cache, cache_bytes);
  DeviceBuffer d_tables = ToDevice(tables), d_offset = ToDevice(table_offset);
  DeviceBuffer d_pos = ToDevice(token_pos);
  DeviceBuffer d_out;
  ASSERT_TRUE(d_out.Allocate(T * H * L * 4, "out").ok());
  MlaAttentionArgs a;
  a.num_tokens = T;
  a.num_heads = H;
  a.kv_lora_rank = L;
  a.rope_dim = R;
  a.q_abs = d_qa.as<float>();
  a.q_pe = d_qp.as<float>();
  a.cache = d_cache.data();
  a.block_stride = block_stride;
  a.block_size = bs;
  a.cache_bf16 = sh.bf16;
  a.tables = d_tables.as<int32_t>();
  a.table_offset = d_offset.as<int64_t>();
  a.token_pos = d_pos.as<int64_t>();
  a.softmax_scale = scale;
  a.out = d_out.as<float>();
  const Status st = MlaAttention(a, nullptr);
  ASSERT_TRUE(st.ok()) << st.message();
  const std::vector<float> got = ToHost<float>(d_out, want.size());

  double max_ref = 0, worst = 0;
  for (float v : want) max_ref = std::max(max_ref, std::fabs(static_cast<double>(v)));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << "at " << i;
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  EXPECT_LE(worst, kTol * max_ref) << "max |gpu - ref| " << worst << ", max |ref| " << max_ref;
}

// One decode token per sequence, at its last position.
std::vector<Token> Decode(const std::vector<int64_t>& lens) {
  std::vector<Token> tokens;
  for (size_t i = 0; i < lens.size(); ++i) tokens.push_back({static_cast<int>(i), lens[i] - 1});
  return tokens;
}

// All positions of sequence `seq` of length `len`, then a few tokens at other positions.
std::vector<Token> PrefillAndMore(int seq, int64_t len) {
  std::vector<Token> tokens;
  for (int64_t p = 0; p < len; ++p) tokens.push_back({seq, p});
  tokens.push_back({0, 0});
  tokens.push_back({1, 16});
  tokens.push_back({1, 15});
  return tokens;
}

class MlaAttentionTest : public ::testing::TestWithParam<bool> {};  // param: bf16 cache

TEST_P(MlaAttentionTest, SmallDecode) {
  EPSERVE_REQUIRE_GPU();
  const std::vector<int64_t> lens = {1, 17, 40, 5, 64, 100};
  RunCase({4, 64, 16, 16, GetParam()}, lens, Decode(lens), 11);
}

TEST_P(MlaAttentionTest, SmallPrefillCausal) {
  EPSERVE_REQUIRE_GPU();
  const std::vector<int64_t> lens = {3, 20, 33};
  RunCase({4, 64, 16, 16, GetParam()}, lens, PrefillAndMore(2, 33), 12);
}

TEST_P(MlaAttentionTest, NarrowLatentBlockSize64) {
  EPSERVE_REQUIRE_GPU();
  const std::vector<int64_t> lens = {33, 65, 200, 2};
  std::vector<Token> tokens = Decode(lens);
  tokens.push_back({2, 63});
  tokens.push_back({2, 64});
  RunCase({3, 32, 16, 64, GetParam()}, lens, tokens, 13);
}

TEST_P(MlaAttentionTest, DeepSeekV3Decode) {
  EPSERVE_REQUIRE_GPU();
  const std::vector<int64_t> lens = {1000, 1, 257, 640};
  RunCase({16, 512, 64, 16, GetParam()}, lens, Decode(lens), 14);
}

TEST_P(MlaAttentionTest, DeepSeekV3Prefill) {
  EPSERVE_REQUIRE_GPU();
  const std::vector<int64_t> lens = {20, 30, 33};
  RunCase({16, 512, 64, 64, GetParam()}, lens, PrefillAndMore(2, 33), 15);
}

TEST_P(MlaAttentionTest, PartialHeadGroup) {  // 6 heads: groups of 4 and 2 at L = 512
  EPSERVE_REQUIRE_GPU();
  const std::vector<int64_t> lens = {70, 9};
  RunCase({6, 512, 64, 16, GetParam()}, lens, Decode(lens), 16);
}

INSTANTIATE_TEST_SUITE_P(Cache, MlaAttentionTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "BF16" : "F32";
                         });

// Argument checks happen before anything touches the device.
TEST(MlaAttentionArgsTest, EmptyIsNoOpAndBadShapesAreRejected) {
  MlaAttentionArgs a;
  EXPECT_TRUE(MlaAttention(a, nullptr).ok());
  a.num_tokens = 1;
  a.num_heads = 1;
  a.kv_lora_rank = 48;
  a.rope_dim = 16;
  EXPECT_EQ(MlaAttention(a, nullptr).code(), StatusCode::kInvalidArgument);
  a.kv_lora_rank = 64;
  a.rope_dim = 80;
  EXPECT_EQ(MlaAttention(a, nullptr).code(), StatusCode::kInvalidArgument);
  a.rope_dim = 16;
  a.block_size = 16;
  a.block_stride = 16 * 80;
  EXPECT_EQ(MlaAttention(a, nullptr).code(), StatusCode::kInvalidArgument);  // null pointers
}

}  // namespace
}  // namespace epserve::cuda
