#include "model/absorbed_uk.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "tensor/dtype.h"

namespace epserve {
namespace {

// The value of element (r, c) of a view, as the exact kernels read it.
float At(const WeightView& v, int64_t r, int64_t c) {
  const auto* p = static_cast<const uint8_t*>(v.data);
  switch (v.dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p + 4 * (r * v.cols + c), 4);
      return f;
    }
    case DType::kBF16: {
      uint16_t b;
      std::memcpy(&b, p + 2 * (r * v.cols + c), 2);
      return Bf16ToF32(b);
    }
    case DType::kF8E4M3:
      return Fp8E4M3ToF32(p[r * v.cols + c]) *
             v.scale[(r + v.scale_row_offset) / kFp8BlockSize * v.ScaleCols() + c / kFp8BlockSize];
    case DType::kI8Packed:
    case DType::kF4E2M1:
    case DType::kF8E8M0:
    case DType::kI8:
    case DType::kI32:
    case DType::kI64:
      break;  // kv_b is never int8, FP4 or a storage type
  }
  return 0;
}

struct Case {
  DType dtype;
  int nope, vd, rank;  // qk_nope_head_dim, v_head_dim, kv_lora_rank
};

class AbsorbedUkTest : public ::testing::TestWithParam<Case> {};

// W_ukᵀ[h](n, k) is W_uk[h](k, n) (kv_b rows h * (nope + vd) + k), for every head of a TP share
// and every layer, main and MTP.
TEST_P(AbsorbedUkTest, TransposesEveryHeadOfEveryLayer) {
  const Case cs = GetParam();
  ModelConfig c;
  c.num_attention_heads = 4;
  c.qk_nope_head_dim = cs.nope;
  c.v_head_dim = cs.vd;
  c.kv_lora_rank = cs.rank;
  const int64_t rows = int64_t{c.num_attention_heads} * (cs.nope + cs.vd), cols = cs.rank;
  std::mt19937 rng(7);
  ModelWeights w;
  w.layers.resize(2);
  w.mtp.resize(1);
  std::vector<std::vector<uint8_t>> data(3);
  std::vector<std::vector<float>> scales(3);
  for (int l = 0; l < 3; ++l) {
    WeightView v{.dtype = cs.dtype, .rows = rows, .cols = cols};
    data[l].resize(rows * cols * DTypeSize(cs.dtype));
    for (auto& b : data[l]) {
      b = static_cast<uint8_t>(rng());
      if (cs.dtype == DType::kF8E4M3 && (b & 0x7f) == 0x7f) b = 0x38;  // no NaN
    }
    if (cs.dtype != DType::kF8E4M3)  // finite values: random mantissas, exponents near 1
      for (int64_t i = 0; i < rows * cols; ++i) {
        const float f = 1.0f + static_cast<float>(rng() % 1000) / 1000.0f;
        if (cs.dtype == DType::kF32)
          std::memcpy(data[l].data() + 4 * i, &f, 4);
        else {
          const uint16_t b = F32ToBf16(i % 2 ? -f : f);
          std::memcpy(data[l].data() + 2 * i, &b, 2);
        }
      }
    v.data = data[l].data();
    if (cs.dtype == DType::kF8E4M3) {
      scales[l].resize(v.ScaleRows() * v.ScaleCols());
      for (auto& s : scales[l]) s = 0.001f * static_cast<float>(1 + rng() % 977);
      v.scale = scales[l].data();
    }
    (l < 2 ? w.layers[l] : w.mtp[0].layer).attn.kv_b = v;
  }
  const int h0 = 2, heads = 2;  // the second half of the heads, as TP rank 1 of 2
  AbsorbedUk uk(c, w, h0, heads);
  ASSERT_FALSE(uk.empty());
  for (int l = 0; l < 3; ++l)
    for (int h = 0; h < heads; ++h) {
      SCOPED_TRACE(::testing::Message() << "layer " << l << " head " << h);
      const WeightView& t = uk.Get(l, h);
      // FP8 heads that start inside a 128-row scale block are kept as bf16(weight x scale).
      const int64_t row0 = (h0 + h) * int64_t{cs.nope + cs.vd};
      const bool rounded = cs.dtype == DType::kF8E4M3 && row0 % kFp8BlockSize != 0;
      EXPECT_EQ(t.dtype, rounded ? DType::kBF16 : cs.dtype);
      ASSERT_EQ(t.rows, cs.rank);
      ASSERT_EQ(t.cols, cs.nope);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 64, 0u);
      const WeightView& kv_b = w.Layer(l).attn.kv_b;
      for (int64_t n = 0; n < t.rows; ++n)
        for (int64_t k = 0; k < t.cols; ++k) {
          float want = At(kv_b, row0 + k, n);
          if (rounded) want = Bf16ToF32(F32ToBf16(want));
          ASSERT_EQ(At(t, n, k), want) << "(" << n << ", " << k << ")";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, AbsorbedUkTest,
    ::testing::Values(
        // DeepSeek-V3's shape (scaled down): every head starts on a 128-row block.
        Case{DType::kF8E4M3, 128, 128, 256},
        // The tiny presets' shape: head 2 starts on a block, head 3 inside one.
        Case{DType::kF8E4M3, 32, 32, 160}, Case{DType::kBF16, 32, 32, 64},
        Case{DType::kF32, 16, 24, 48}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::to_string(i.index); });

}  // namespace
}  // namespace epserve
