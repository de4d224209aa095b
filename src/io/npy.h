// Writes float32 arrays in NumPy's .npy format (version 1.0, little-endian, C order).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace epserve {

Status WriteNpyF32(const std::string& path, const std::vector<int64_t>& shape, const float* data);

// Reads a float32 .npy written by WriteNpyF32 or NumPy (little-endian '<f4', C order).
struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};
StatusOr<NpyArray> ReadNpyF32(const std::string& path);

}  // namespace epserve
