// Shared by the CUDA op tests: skip without a GPU (with the runtime's reason), random inputs,
// device copies, and the error bound every op is held to against its CPU twin.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/device.h"
#include "tensor/dtype.h"
#include "tensor/weight_view.h"

namespace epserve::cuda::testing {

// GTEST_SKIP()s the calling test with the reason when no GPU can be used. Use at the top of
// every test that touches the device: a machine without a GPU reports the test skipped, never
// passed.
#define EPSERVE_REQUIRE_GPU()                                                  \
  do {                                                                         \
    auto _probe = ::epserve::cuda::Use(0);                                     \
    if (!_probe.ok()) GTEST_SKIP() << "no GPU: " << _probe.status().message(); \
  } while (0)

inline std::vector<float> RandomFloats(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A host weight [rows, cols] of `dtype` with random values, and its device copy.
struct TestWeight {
  std::vector<uint8_t> data;
  std::vector<float> scale;
  WeightView host;  // pointers into data/scale
  DeviceBuffer d_data, d_scale;
  WeightView device;  // the same view over device memory
};
inline void MakeTestWeight(DType dtype, int64_t rows, int64_t cols, uint64_t seed, TestWeight* w) {
  const std::vector<float> v = RandomFloats(rows * cols, seed, 0.05f);
  w->host = {.dtype = dtype, .rows = rows, .cols = cols};
  if (dtype == DType::kF32) {
    w->data.resize(v.size() * 4);
    std::memcpy(w->data.data(), v.data(), w->data.size());
  } else if (dtype == DType::kBF16) {
    w->data.resize(v.size() * 2);
    auto* p = reinterpret_cast<uint16_t*>(w->data.data());
    for (size_t i = 0; i < v.size(); ++i) p[i] = F32ToBf16(v[i]);
  } else {
    // FP8 e4m3 with one scale per 128x128 tile (the block's max maps to 448).
    const int64_t sr = (rows + 127) / 128, sc = (cols + 127) / 128;
    w->scale.assign(sr * sc, 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        float& s = w->scale[(r / 128) * sc + c / 128];
        s = std::max(s, std::fabs(v[r * cols + c]) / kFp8E4M3Max);
      }
    for (float& s : w->scale)
      if (s == 0.0f) s = 1.0f;
    w->data.resize(v.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        w->data[r * cols + c] = F32ToFp8E4M3(v[r * cols + c] / w->scale[(r / 128) * sc + c / 128]);
  }
  w->host.data = w->data.data();
  w->host.scale = w->scale.empty() ? nullptr : w->scale.data();
  w->device = w->host;
  EXPECT_TRUE(
      w->d_data.Upload(w->data.data(), static_cast<int64_t>(w->data.size()), "weight").ok());
  w->device.data = w->d_data.data();
  if (!w->scale.empty()) {
    EXPECT_TRUE(
        w->d_scale.Upload(w->scale.data(), static_cast<int64_t>(w->scale.size() * 4), "scales")
            .ok());
    w->device.scale = w->d_scale.as<float>();
  }
}

inline DeviceBuffer ToDevice(const void* host, size_t bytes) {
  DeviceBuffer b;
  EXPECT_TRUE(b.Upload(host, static_cast<int64_t>(bytes), "test input").ok());
  return b;
}
template <typename T>
DeviceBuffer ToDevice(const std::vector<T>& v) {
  return ToDevice(v.data(), v.size() * sizeof(T));
}
template <typename T>
std::vector<T> ToHost(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  EXPECT_TRUE(cudaDeviceSynchronize() == cudaSuccess);
  EXPECT_TRUE(cudaMemcpy(v.data(), b.data(), n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return v;
}

// The largest |got - want| / (magnitude + tiny) over the elements, where magnitude[i] is the
// sum of |terms| that made want[i] (f32 sums in any order differ from the exact one by at most
// about K * 2^-24 of it; the bound each test states is a multiple of that).
inline double MaxRelativeError(const std::vector<float>& got, const std::vector<float>& want,
                               const std::vector<double>& magnitude) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double m = magnitude.empty() ? std::fabs(want[i]) : magnitude[i];
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]) / (m + 1e-30);
    if (!(e <= worst)) worst = e;  // NaN makes it NaN-large
    if (std::isnan(got[i])) return INFINITY;
  }
  return worst;
}

}  // namespace epserve::cuda::testing
