// A model's weights on the device: every tensor of ModelWeights uploaded in its own format
// (FP8 e4m3 + 128x128 fp32 block scales, BF16, F32), as WeightViews over device memory, and the
// norm vectors and router biases as fp32 device arrays. The host ModelWeights may be dropped
// afterwards. Upload prints progress and GB/s through `progress` when given. Synthetic makes the
// same tensors without a checkpoint: allocated and filled with random values on the device, for
// measuring real shapes (DeepSeek-V3, 690 GB) that no file here could hold.
// Thread safety: immutable after Upload / Synthetic.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "cuda/device.h"
#include "model/config.h"
#include "model/synthetic.h"
#include "model/weights.h"

namespace epserve::cuda {

struct DeviceMlp {
  WeightView gate, up, down;
  bool empty() const { return gate.empty(); }
};

struct DeviceLayer {
  const float *input_norm = nullptr, *post_norm = nullptr;
  const float *q_a_norm = nullptr, *kv_a_norm = nullptr;
  WeightView q_a, q_b, q, kv_a, kv_b, o;
  DeviceMlp dense;  // dense layers
  bool moe = false;
  WeightView router;
  const float* score_bias = nullptr;  // null unless noaux_tc
  std::vector<DeviceMlp> experts;     // by expert id
  DeviceMlp shared;
};

struct DeviceWeights {
  WeightView embed, lm_head;
  const float* final_norm = nullptr;
  std::vector<DeviceLayer> layers;  // the main model's layers (MTP modules are not uploaded yet)
  int64_t bytes = 0;                // device memory the weights take

  // Called with (bytes uploaded, total bytes) now and then during Upload.
  using Progress = std::function<void(int64_t done, int64_t total)>;
  // Errors name the tensor that did not fit ("uploading layer 3 expert 17 down_proj:
  // out of memory, ..."). kI8Packed weights (--requant int8) are refused: the GPU reads the
  // checkpoint's own formats.
  static StatusOr<std::unique_ptr<DeviceWeights>> Upload(const ModelConfig& config,
                                                         const ModelWeights& host,
                                                         const Progress& progress = nullptr);

  // Every tensor the forward pass reads, made in device memory (no host copy, no file) as
  // model/synthetic.cc would write it: projections in `dtype` (FP8 e4m3 with 128x128 fp32 block
  // scales, or BF16) uniform with std 1/sqrt(cols); the router, embedding (std 1) and LM head
  // (std 1/sqrt(hidden)) in BF16; norms f32 around 1 (std 0.1); e_score_correction_bias f32
  // around 0 (std 0.02). Each value is a hash of (seed, the tensor's index in making order, its
  // element index): the same arguments give the same bytes on any GPU. MTP modules are not
  // made. Out of memory: Unavailable naming the tensor ("making layer 3 expert 17 down_proj:
  // allocating ...: out of memory, 2.1 GiB free of 139.8 GiB"). Progress as for Upload.
  static StatusOr<std::unique_ptr<DeviceWeights>> Synthetic(const ModelConfig& config,
                                                            WeightDType dtype, uint64_t seed,
                                                            const Progress& progress = nullptr);
  // The device memory Synthetic(config, dtype, ...) takes, without allocating anything.
  static StatusOr<int64_t> SyntheticBytes(const ModelConfig& config, WeightDType dtype);

 private:
  std::vector<DeviceBuffer> buffers_;
};

}  // namespace epserve::cuda
