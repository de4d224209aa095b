// Element types of checkpoint tensors and their conversions to/from float32.
// FP8 here is always float8 e4m3 "fn" (bias 7, no infinities, 0x7f/0xff = NaN, max 448),
// the format of DeepSeek-V3's FP8 checkpoints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace epserve {

// kI8Packed is not a checkpoint type: weights requantized to int8 at load (LoadOptions::
// requant, docs/kernels.md "Int8 weights"), in the kernel's interleaved layout (weight_view.h).
// kF4E2M1: FP4 e2m1 values two per byte (element 2j in the low nibble of byte j, 2j + 1 in the
// high one) with one UE8M0 scale byte per 32 elements of a row: DeepSeek-V4's routed experts,
// which its checkpoints store as I8 [rows, cols / 2] plus F8_E8M0 [rows, cols / 32]
// (docs/v4-model.md §2; weight_view.h).
// kF8E8M0, kI8, kI32, kI64 are storage types of checkpoint tensors that are not weights a kernel
// multiplies: UE8M0 scale bytes, the I8 bytes of packed FP4, index tables (V4's tid2eid). Only
// the safetensors reader and the loaders that interpret them see them; no WeightView holds one.
enum class DType { kF32, kBF16, kF8E4M3, kI8Packed, kF4E2M1, kF8E8M0, kI8, kI32, kI64 };

// Bytes per element (1 for kI8Packed, whose rows and scales are padded: WeightView::DataBytes).
// REQUIRES: not kF4E2M1, whose element is half a byte (WeightView::RowBytes, DataBytes).
size_t DTypeSize(DType dtype);
// safetensors spelling: "F32", "BF16", "F8_E4M3", "F8_E8M0", "I8", "I32", "I64" ("I8_PACKED"
// and "F4_E2M1", which no file holds under that name).
const char* DTypeName(DType dtype);
// Parses the safetensors spelling of a storage type (not I8_PACKED or F4_E2M1); false if unknown.
bool ParseDType(std::string_view name, DType* out);

inline float Bf16ToF32(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round-to-nearest-even; NaN stays NaN.
inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// 256-entry table: kFp8E4M3ToF32[byte] is the value of that e4m3fn byte.
extern const float kFp8E4M3ToF32[256];

inline float Fp8E4M3ToF32(uint8_t v) { return kFp8E4M3ToF32[v]; }

// Round-to-nearest-even with saturation to +-448 (values beyond are clamped, as
// block quantization scales them into range first).
uint8_t F32ToFp8E4M3(float f);

constexpr float kFp8E4M3Max = 448.0f;
constexpr int kFp8BlockSize = 128;  // weight tiles are 128x128, activations 1x128

// FP4 e2m1: nibble n (bit 3 the sign, 2 exponent bits, 1 mantissa bit) is
// kFp4E2M1ToF32[n] = {0, 0.5, 1, 1.5, 2, 3, 4, 6} for n = 0..7, their negatives for 8..15.
extern const float kFp4E2M1ToF32[16];
constexpr int kFp4BlockSize = 32;  // elements of a row per UE8M0 scale byte

// A UE8M0 scale byte b: 2^(b - 127) (b = 255 is NaN), exactly.
float Ue8m0ToF32(uint8_t b);

}  // namespace epserve
