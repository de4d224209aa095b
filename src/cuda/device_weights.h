// A model's weights on the device: every tensor of ModelWeights uploaded in its own format
// (FP8 e4m3 + 128x128 fp32 block scales, BF16, F32), as WeightViews over device memory, and the
// norm vectors and router biases as fp32 device arrays. The host ModelWeights may be dropped
// afterwards. Upload prints progress and GB/s through `progress` when given.
// Thread safety: immutable after Upload.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "cuda/device.h"
#include "model/config.h"
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

 private:
  std::vector<DeviceBuffer> buffers_;
};

}  // namespace epserve::cuda
