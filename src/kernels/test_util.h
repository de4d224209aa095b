// Test helpers for the kernels: run a check on every SIMD target compiled into the kernels and
// supported by this CPU, and build random weights in every dtype.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "tensor/weight_view.h"

namespace epserve::kernels::testing {

// Calls fn() once per target with runtime dispatch forced to that target.
template <class F>
void ForEachTarget(const F& fn) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    fn();
  }
  hwy::SetSupportedTargetsForTest(0);
}

struct TestWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> scale;
  WeightView view;
};

// N(0, 1) weights [n, k]; FP8 ones are N(0, 50) codes with tile scales 0.01 .. 0.05.
inline TestWeight MakeWeight(DType dtype, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  TestWeight t;
  t.bytes.resize(n * k * DTypeSize(dtype));
  for (int64_t i = 0; i < n * k; ++i) {
    float v = dist(rng);
    if (dtype == DType::kF32) std::memcpy(&t.bytes[i * 4], &v, 4);
    if (dtype == DType::kBF16) {
      uint16_t b = F32ToBf16(v);
      std::memcpy(&t.bytes[i * 2], &b, 2);
    }
    if (dtype == DType::kF8E4M3) t.bytes[i] = F32ToFp8E4M3(v * 50.0f);
  }
  t.view = WeightView{.dtype = dtype, .rows = n, .cols = k, .data = t.bytes.data()};
  if (dtype == DType::kF8E4M3) {
    t.scale.resize(t.view.ScaleRows() * t.view.ScaleCols());
    for (size_t i = 0; i < t.scale.size(); ++i) t.scale[i] = 0.01f * (1 + i % 5);
    t.view.scale = t.scale.data();
  }
  return t;
}

inline std::vector<float> RandomVector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Test-name suffix of a dtype parameter: FP8, BF16, F32.
inline std::string DTypeTestName(DType dtype) {
  const std::string name = DTypeName(dtype);
  return name.substr(0, 2) == "F8" ? std::string("FP8") : name;
}

}  // namespace epserve::kernels::testing
