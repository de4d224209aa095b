// Per-target SIMD building blocks shared by the kernels: weight loads with fused dequantization
// and small helpers. Included once per Highway target (foreach_target), hence the toggle guard
// instead of #pragma once. Every function here is inline and allocation-free.
//
// FP8 e4m3 loads return value / 256 exactly: the byte is moved into an IEEE half (sign, 4 of 5
// exponent bits, 3 mantissa bits) and widened with the hardware half->float conversion, which
// handles e4m3 subnormals without float denormals. Callers multiply by 256 * block scale.
// The NaN codes 0x7f/0xff read as +-480; checkpoints never contain them.

#if defined(EPSERVE_KERNELS_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef EPSERVE_KERNELS_SIMD_INL_H_
#undef EPSERVE_KERNELS_SIMD_INL_H_
#else
#define EPSERVE_KERNELS_SIMD_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "tensor/weight_view.h"

HWY_BEFORE_NAMESPACE();
namespace epserve::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Vector registers of the target (x86 AVX-512 and Arm have 32, the rest 16): how many
// accumulators a register-blocked kernel can keep.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_ARCH_ARM
constexpr int kVecRegs = 32;
#else
constexpr int kVecRegs = 16;
#endif

// Factor between LoadFp8 results and e4m3 values.
constexpr float kFp8LoadScale = 256.0f;

// Lanes(df) e4m3 bytes -> floats equal to value / 256.
template <class DF>
HWY_INLINE hn::Vec<DF> LoadFp8(DF df, const uint8_t* HWY_RESTRICT p) {
  const hn::Rebind<int8_t, DF> d8;
  const hn::Rebind<int16_t, DF> d16;
  const hn::Rebind<hwy::float16_t, DF> dh;
  auto v = hn::PromoteTo(d16, hn::LoadU(d8, reinterpret_cast<const int8_t*>(p)));
  // Sign-extended byte << 7: sign in bit 15 (and, spuriously, 14), exponent in 13..10, mantissa
  // in 9..7. Clearing bit 14 leaves a half with the e4m3 bits and exponent bias 15 instead of 7.
  v = hn::And(hn::ShiftLeft<7>(v), hn::Set(d16, static_cast<int16_t>(0xBFFF)));
  return hn::PromoteTo(df, hn::BitCast(dh, v));
}

// 2 * Lanes(df) e4m3 bytes -> two float vectors (values / 256), widening once at full width:
// fewer instructions per byte than two LoadFp8.
template <class DF>
HWY_INLINE void LoadFp8x2(DF df, const uint8_t* HWY_RESTRICT p, hn::Vec<DF>& lo, hn::Vec<DF>& hi) {
#if HWY_TARGET == HWY_SCALAR
  lo = LoadFp8(df, p);
  hi = LoadFp8(df, p + 1);
#else
  const hn::Repartition<int16_t, DF> d16;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const hn::Repartition<hwy::float16_t, DF> dh;
  const hn::Half<decltype(dh)> dhh;
  auto v = hn::PromoteTo(d16, hn::LoadU(d8, reinterpret_cast<const int8_t*>(p)));
  v = hn::And(hn::ShiftLeft<7>(v), hn::Set(d16, static_cast<int16_t>(0xBFFF)));
  const auto h = hn::BitCast(dh, v);
  lo = hn::PromoteTo(df, hn::LowerHalf(dhh, h));
  hi = hn::PromoteTo(df, hn::UpperHalf(dhh, h));
#endif
}

// Lanes(df) bfloat16 values -> floats (exact).
template <class DF>
HWY_INLINE hn::Vec<DF> LoadBf16(DF df, const uint16_t* HWY_RESTRICT p) {
  const hn::Rebind<hwy::bfloat16_t, DF> dbf;
  return hn::PromoteTo(df, hn::LoadU(dbf, reinterpret_cast<const hwy::bfloat16_t*>(p)));
}

// Row `row` of a weight as raw pointers: element k of the row is at data + k (in elements of
// the row's dtype); FP8 rows also point at their 128-wide block scales.
struct WeightRow {
  const void* data = nullptr;
  const float* scales = nullptr;  // FP8 only: scales[k / 128]
};

HWY_INLINE WeightRow RowOf(const WeightView& w, int64_t row) {
  WeightRow r;
  r.data = static_cast<const uint8_t*>(w.data) + row * w.RowBytes();
  if (w.dtype == DType::kF8E4M3)
    r.scales = w.scale + ((row + w.scale_row_offset) / kFp8BlockSize) * w.ScaleCols();
  return r;
}

// Loads Lanes(df) weights of a row starting at element k, as float, without the FP8 block scale
// (FP8 values come divided by 256; see LoadFp8). k need not be aligned.
template <DType kDType, class DF>
HWY_INLINE hn::Vec<DF> LoadWeight(DF df, const void* row_data, int64_t k) {
  if constexpr (kDType == DType::kF32) {
    return hn::LoadU(df, static_cast<const float*>(row_data) + k);
  } else if constexpr (kDType == DType::kBF16) {
    return LoadBf16(df, static_cast<const uint16_t*>(row_data) + k);
  } else {
    return LoadFp8(df, static_cast<const uint8_t*>(row_data) + k);
  }
}

// 2 * Lanes(df) weights of a row starting at element k (see LoadWeight).
template <DType kDType, class DF>
HWY_INLINE void LoadWeight2(DF df, const void* row_data, int64_t k, hn::Vec<DF>& lo,
                            hn::Vec<DF>& hi) {
  if constexpr (kDType == DType::kF8E4M3) {
    LoadFp8x2(df, static_cast<const uint8_t*>(row_data) + k, lo, hi);
  } else {
    lo = LoadWeight<kDType>(df, row_data, k);
    hi = LoadWeight<kDType>(df, row_data, k + static_cast<int64_t>(hn::Lanes(df)));
  }
}

// Same for the last `count` < Lanes(df) elements of a row: reads exactly `count` elements and
// fills the remaining lanes with zeros.
template <DType kDType, class DF>
HWY_INLINE hn::Vec<DF> LoadWeightTail(DF df, const void* row_data, int64_t k, int64_t count) {
  constexpr size_t kElem = kDType == DType::kF32 ? 4 : kDType == DType::kBF16 ? 2 : 1;
  alignas(64) uint8_t buf[HWY_MAX_BYTES] = {};
  std::memcpy(buf, static_cast<const uint8_t*>(row_data) + k * kElem, count * kElem);
  return LoadWeight<kDType>(df, buf, 0);
}

// Block-scale multiplier that turns LoadWeight results into real values for elements of
// the 128-wide block `block` (1 for unscaled dtypes).
template <DType kDType>
HWY_INLINE float LoadScale(const WeightRow& r, int64_t block) {
  if constexpr (kDType == DType::kF8E4M3) {
    return r.scales[block] * kFp8LoadScale;
  } else {
    (void)r;
    (void)block;
    return 1.0f;
  }
}

// out[i] = W[row, k_begin + i] for i < count, as float (the vectorized DequantizeRow).
template <DType kDType, class DF>
HWY_INLINE void DequantizeSpan(DF df, const WeightView& w, int64_t row, int64_t k_begin,
                               int64_t count, float* HWY_RESTRICT out) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const WeightRow r = RowOf(w, row);
  const int64_t k_end = k_begin + count;
  for (int64_t k = k_begin; k < k_end;) {
    const int64_t block = k / kFp8BlockSize;
    const int64_t block_end = std::min(k_end, (block + 1) * kFp8BlockSize);
    const auto s = hn::Set(df, LoadScale<kDType>(r, block));
    for (; k + N <= block_end; k += N)
      hn::StoreU(hn::Mul(LoadWeight<kDType>(df, r.data, k), s), df, out + (k - k_begin));
    if (k < block_end) {
      alignas(64) float tmp[HWY_MAX_BYTES / sizeof(float)];
      hn::Store(hn::Mul(LoadWeightTail<kDType>(df, r.data, k, block_end - k), s), df, tmp);
      std::memcpy(out + (k - k_begin), tmp, (block_end - k) * sizeof(float));
      k = block_end;
    }
  }
}

// out[i] = W[row, k_begin + i] for i < count as LoadWeight returns it: for FP8 without the
// block scale (value / 256), for the other dtypes the value itself.
template <DType kDType, class DF>
HWY_INLINE void ConvertSpanUnscaled(DF df, const WeightView& w, int64_t row, int64_t count,
                                    float* HWY_RESTRICT out, int64_t k_begin = 0) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const WeightRow r = RowOf(w, row);
  int64_t k = 0;
  for (; k + N <= count; k += N) hn::StoreU(LoadWeight<kDType>(df, r.data, k_begin + k), df, out + k);
  if (k < count) {
    alignas(64) float tmp[HWY_MAX_BYTES / sizeof(float)];
    hn::Store(LoadWeightTail<kDType>(df, r.data, k_begin + k, count - k), df, tmp);
    std::memcpy(out + k, tmp, (count - k) * sizeof(float));
  }
}

// Sum of all lanes as a scalar.
template <class DF>
HWY_INLINE float ReduceSumF(DF df, hn::Vec<DF> v) {
  return hn::GetLane(hn::SumOfLanes(df, v));
}

}  // namespace epserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // EPSERVE_KERNELS_SIMD_INL_H_ toggle
