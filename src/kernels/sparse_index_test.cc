#include "kernels/sparse_index.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/test_util.h"
#include "tensor/dtype.h"

namespace epserve::kernels {
namespace {

using testing::ForEachTarget;
using testing::RandomVector;

TEST(SparseIndexTest, QuantizeIndexFp8AsDeepSeeksActQuant) {
  std::vector<float> x = RandomVector(kIndexBlock, 1);
  x[5] = -3.5f;  // amax
  for (float& v : x) v = std::clamp(v, -3.5f, 3.5f);
  uint8_t q[kIndexBlock];
  const float s = QuantizeIndexFp8(x.data(), kIndexBlock, false, q);
  EXPECT_EQ(s, 3.5f * (1.0f / 448.0f));
  EXPECT_EQ(Fp8E4M3ToF32(q[5]), -448.0f);
  for (int i = 0; i < kIndexBlock; ++i) EXPECT_EQ(q[i], F32ToFp8E4M3(x[i] / s)) << i;
  // UE8M0: the smallest power of two >= amax / 448; values saturate at +-448.
  const float su = QuantizeIndexFp8(x.data(), kIndexBlock, true, q);
  EXPECT_EQ(su, 1.0f / 128.0f);  // 3.5 / 448 = 2^-7
  x[5] = -3.6f;
  const float su2 = QuantizeIndexFp8(x.data(), kIndexBlock, true, q);
  EXPECT_EQ(su2, 1.0f / 64.0f);
  EXPECT_GE(su2, 3.6f / 448.0f);
  // An all-zero block has scale 1e-4 / 448 and zero bytes (no division by zero).
  std::vector<float> zero(kIndexBlock, 0.0f);
  EXPECT_EQ(QuantizeIndexFp8(zero.data(), kIndexBlock, false, q), 1e-4f * (1.0f / 448.0f));
  for (int i = 0; i < kIndexBlock; ++i) EXPECT_EQ(q[i], 0);
}

TEST(SparseIndexTest, HadamardIsOrthonormalSylvester) {
  // H x for x = e_j is column j of H / sqrt(n): entries +-1/sqrt(n) with sign (-1)^popcount(i&j).
  const int n = 128;
  for (int j : {0, 1, 77, 127}) {
    std::vector<float> x(n, 0.0f);
    x[j] = 1.0f;
    HadamardRotate(x.data(), n);
    for (int i = 0; i < n; ++i)
      ASSERT_FLOAT_EQ(x[i], (__builtin_popcount(i & j) % 2 ? -1.0f : 1.0f) / std::sqrt(128.0f));
  }
  // Twice is the identity (H H / n = I).
  std::vector<float> x = RandomVector(n, 2), y = x;
  HadamardRotate(y.data(), n);
  HadamardRotate(y.data(), n);
  for (int i = 0; i < n; ++i) ASSERT_NEAR(y[i], x[i], 1e-5);
}

TEST(SparseIndexTest, ScoresMatchTheReferenceInPagedRowsForAnyThreadCount) {
  const int H = 8, D = kIndexBlock;
  const int64_t n = 300, bs = 32, row = 132 + 20;  // keys inside wider rows
  const int64_t blocks = (n + bs - 1) / bs + 2;
  std::mt19937 rng(3);
  std::vector<uint8_t> storage(blocks * bs * row);
  std::vector<float> r = RandomVector(storage.size(), 4);
  for (size_t i = 0; i < storage.size(); ++i) storage[i] = F32ToFp8E4M3(r[i]);
  std::vector<int32_t> table;
  for (int64_t b = 0; b < blocks - 2; ++b) table.push_back(static_cast<int32_t>(blocks - 1 - b));
  for (int64_t s = 0; s < n; ++s) {  // the scales
    float scale = std::ldexp(1.0f, static_cast<int>(s % 7) - 9);
    std::memcpy(&storage[table[s / bs] * bs * row + (s % bs) * row + 20 + D], &scale, 4);
  }
  std::vector<uint8_t> q(H * D);
  std::vector<float> qr = RandomVector(H * D, 5), w = RandomVector(H, 6);
  for (int i = 0; i < H * D; ++i) q[i] = F32ToFp8E4M3(qr[i] * 8);
  std::vector<float> ref(n);
  IndexScoreArgs args{.num_heads = H,
                      .head_dim = D,
                      .q = q.data(),
                      .weights = w.data(),
                      .keys = {.base = storage.data() + 20,
                               .block_stride = bs * row,
                               .row_stride = row,
                               .block_size = bs},
                      .blocks = table.data(),
                      .num_positions = n,
                      .scores = ref.data()};
  IndexScoresReference(args);
  int positive = 0;
  for (float v : ref) positive += v > 0;
  EXPECT_GT(positive, 10);
  EXPECT_LT(positive, n - 10);
  ForEachTarget([&] {
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      std::vector<float> out(n);
      args.scores = out.data();
      IndexScores(args, pool);
      for (int64_t s = 0; s < n; ++s)
        ASSERT_NEAR(out[s], ref[s], 1e-5 * (1 + std::fabs(ref[s]))) << s;
      if (first.empty()) first = out;
      ASSERT_EQ(out, first) << threads << " threads";
    }
  });
}

TEST(SparseIndexTest, TopKTiesGoToTheLowerPositionAndTheListIsAscending) {
  const std::vector<float> scores = {1, 5, 3, 5, NAN, 2, 5, -1};
  std::vector<int32_t> out(3);
  SelectTopK(scores.data(), 8, 3, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{1, 3, 6}));
  out.resize(2);
  SelectTopK(scores.data(), 8, 2, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{1, 3}));
  out.resize(5);
  SelectTopK(scores.data(), 8, 5, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2, 3, 5, 6}));
  out.resize(8);
  SelectTopK(scores.data(), 8, 8, out.data());  // NaN last, but all are listed
  EXPECT_EQ(out, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

}  // namespace
}  // namespace epserve::kernels
