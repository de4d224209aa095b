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
enum class DType { kF32, kBF16, kF8E4M3, kI8Packed };

// Bytes per element (1 for kI8Packed, whose rows and scales are padded: WeightView::DataBytes).
size_t DTypeSize(DType dtype);
// safetensors spelling: "F32", "BF16", "F8_E4M3" ("I8_PACKED", which no file holds).
const char* DTypeName(DType dtype);
// Parses the safetensors spelling; false if unknown.
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

}  // namespace epserve
