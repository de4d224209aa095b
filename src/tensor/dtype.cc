#include "tensor/dtype.h"

#include <array>
#include <cmath>

namespace epserve {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kF8E4M3:
      return 1;
    case DType::kI8Packed:
      return 1;
    case DType::kF8E8M0:
    case DType::kI8:
      return 1;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kF4E2M1:
      break;
  }
  __builtin_trap();  // kF4E2M1 has no whole-byte element size (WeightView::RowBytes)
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF8E4M3:
      return "F8_E4M3";
    case DType::kI8Packed:
      return "I8_PACKED";
    case DType::kF4E2M1:
      return "F4_E2M1";
    case DType::kF8E8M0:
      return "F8_E8M0";
    case DType::kI8:
      return "I8";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
  }
  return "?";
}

bool ParseDType(std::string_view name, DType* out) {
  if (name == "F32")
    *out = DType::kF32;
  else if (name == "BF16")
    *out = DType::kBF16;
  else if (name == "F8_E4M3")
    *out = DType::kF8E4M3;
  else if (name == "F8_E8M0")
    *out = DType::kF8E8M0;
  else if (name == "I8")
    *out = DType::kI8;
  else if (name == "I32")
    *out = DType::kI32;
  else if (name == "I64")
    *out = DType::kI64;
  else
    return false;
  return true;
}

const float kFp4E2M1ToF32[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                 -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

float Ue8m0ToF32(uint8_t b) {
  if (b == 255) return __builtin_nanf("");
  return std::ldexp(1.0f, static_cast<int>(b) - 127);
}

namespace {
constexpr float DecodeE4M3(uint8_t v) {
  int sign = v >> 7, exp = (v >> 3) & 0xf, mant = v & 7;
  float mag = 0.0f;
  if (exp == 0xf && mant == 7) {
    mag = __builtin_nanf("");
  } else if (exp == 0) {
    mag = static_cast<float>(mant) / 8.0f / 64.0f;  // subnormal: mant/8 * 2^-6
  } else {
    float p = 1.0f;
    for (int i = 7; i < exp; ++i) p *= 2.0f;
    for (int i = exp; i < 7; ++i) p /= 2.0f;
    mag = (1.0f + static_cast<float>(mant) / 8.0f) * p;
  }
  return sign ? -mag : mag;
}

constexpr std::array<float, 256> MakeTable() {
  std::array<float, 256> t{};
  for (int i = 0; i < 256; ++i) t[i] = DecodeE4M3(static_cast<uint8_t>(i));
  return t;
}
constexpr std::array<float, 256> kTable = MakeTable();
}  // namespace

const float kFp8E4M3ToF32[256] = {
#define E(i) kTable[i]
#define E8(i) E(i), E(i + 1), E(i + 2), E(i + 3), E(i + 4), E(i + 5), E(i + 6), E(i + 7)
#define E64(i) \
  E8(i), E8(i + 8), E8(i + 16), E8(i + 24), E8(i + 32), E8(i + 40), E8(i + 48), E8(i + 56)
    E64(0), E64(64), E64(128), E64(192)
#undef E64
#undef E8
#undef E
};

uint8_t F32ToFp8E4M3(float f) {
  if (std::isnan(f)) return 0x7f;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint8_t sign = (bits >> 24) & 0x80;
  const float a = std::fabs(f);
  if (a >= kFp8E4M3Max) return sign | 0x7e;
  if (a < 0.015625f) {  // below 2^-6: subnormal codes, spacing 2^-9, round half to even
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  // Normal: rebias the exponent (127 -> 7) and round the mantissa to 3 bits, ties to even;
  // a mantissa carry correctly bumps the exponent.
  uint32_t x = (bits & 0x7fffffffu) - ((127u - 7u) << 23);
  x += 0x7ffffu + ((x >> 20) & 1u);
  uint32_t code = x >> 20;
  if (code > 0x7e) code = 0x7e;
  return sign | static_cast<uint8_t>(code);
}

}  // namespace epserve
