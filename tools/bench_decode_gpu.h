// `epserve bench decode --device cuda`: the GPU decode benchmark (src/cuda/decode_bench.h) on
// a preset's real shapes with weights made on the device; prints a table or one JSON object.
// In a build without the CUDA backend it returns an error saying so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace epserve::tools {

struct GpuDecodeFlags {
  std::string device = "cuda";  // cuda or cuda:N
  std::string preset = "v2-lite";
  int layers = 0;     // the preset's first N layers; 0: all of them
  std::string dtype;  // bf16 | fp8; empty: the preset's released format (v3 fp8, others bf16)
  std::vector<int> batches = {1, 32, 128};
  int context = 1024;
  int steps = 20;
  int warmup = 3;
  std::string kv_dtype = "bf16";
  uint64_t seed = 0;
  bool same_tokens = false;
  double bandwidth_gib = 2.0;
  bool json = false;
};

Status RunGpuDecode(const GpuDecodeFlags& flags);

}  // namespace epserve::tools
