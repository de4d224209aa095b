// The DeepSeek-V2/V3 forward pass on one GPU: the same stages as model/model.cc (docs/
// architecture.md, "The device seam"), each a call of src/cuda's kernels on device buffers, over
// the same ForwardBatch and KvBlocks types. The KvBlocks view's data is device memory
// (DeviceKvStorage); block tables stay on the host (the engine's KvBlockPool) and travel with
// each step. Logits come back to host memory for the sampler.
// Today: the main model's layers (dense and MoE, q_lora or plain q), one process, routed
// experts computed in-process (the expert-major layout and the experts' work items are made on
// the device from the gate's choices: no host round trip inside a MoE layer). Not yet on the
// GPU: MTP, tensor/expert parallelism, --overlap, the per-layer non-finite check (logits are
// checked once at the end).
// Thread safety: one Forward at a time.
#pragma once

#include <memory>
#include <vector>

#include "base/status.h"
#include "cuda/device.h"
#include "cuda/device_weights.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/rope.h"

namespace epserve::cuda {

// Latent cache blocks in device memory, zero-initialised; view() is a KvBlocks whose data is a
// device pointer (read only by CudaModel).
class DeviceKvStorage {
 public:
  static StatusOr<std::unique_ptr<DeviceKvStorage>> Create(int num_layers, int row_width,
                                                           int64_t block_size, int64_t num_blocks,
                                                           KvDType dtype);
  const KvBlocks& view() const { return view_; }

 private:
  DeviceBuffer bytes_;
  KvBlocks view_;
};

class CudaModel : public ForwardBackend {
 public:
  // The weights must stay alive as long as the model; `config` too.
  static StatusOr<std::unique_ptr<CudaModel>> Create(const ModelConfig& config,
                                                     const DeviceWeights& weights,
                                                     const DeviceInfo& device);
  ~CudaModel() override;

  std::string Describe() const override { return device_.Describe(); }
  // ForwardBackend: Forward, then the non-finite chunks appended.
  Status Forward(const ForwardBatch& batch, const KvBlocks& kv, float* logits,
                 std::vector<NonFiniteActivation>* non_finite) override;

  // As Model::Forward: writes each token's latent row into its block of `kv` (device memory),
  // and the logits rows the chunks want to host `logits` [rows, vocab], in chunk order.
  Status Forward(const ForwardBatch& batch, const KvBlocks& kv, float* logits);
  // Chunks whose logits rows held a NaN or infinity in the last Forward (layer = the last one).
  const std::vector<NonFiniteActivation>& non_finite() const { return non_finite_; }

 private:
  struct Buffers;
  CudaModel(const ModelConfig& config, const DeviceWeights& weights, const DeviceInfo& device);
  Status Prepare(const ForwardBatch& batch, const KvBlocks& kv);
  Status Attention(int layer, const KvBlocks& kv);
  Status Moe(int layer);
  Status Mlp(const DeviceMlp& w, const float* x, int64_t rows, float* out);
  Status Head(const ForwardBatch& batch, float* logits);

  const ModelConfig& config_;
  const DeviceWeights& weights_;
  DeviceInfo device_;
  RopeTable rope_;
  int64_t rope_uploaded_ = 0;  // positions of rope_ on the device
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Buffers> b_;
  std::vector<NonFiniteActivation> non_finite_;
};

}  // namespace epserve::cuda
