#include "tools/device_flag.h"

#include <cstdio>

#include "base/timer.h"
#include "tools/command.h"

#ifdef EPSERVE_HAVE_CUDA
#include "cuda/cuda_model.h"
#include "cuda/device.h"
#include "cuda/device_weights.h"
#endif

namespace epserve::tools {

CLI::Option* DeviceFlag::AddTo(CLI::App* cmd) {
  return cmd
      ->add_option("--device", device,
                   "where the forward pass runs: cpu, or cuda / cuda:N (GPU N; weights and the "
                   "cache pool in its memory)")
      ->capture_default_str();
}

StatusOr<int> ParseDeviceIndex(const std::string& d) {
  if (d == "cuda") return 0;
  if (d.rfind("cuda:", 0) == 0) {
    const std::string n = d.substr(5);
    if (!n.empty() && n.size() < 4 && n.find_first_not_of("0123456789") == std::string::npos)
      return std::stoi(n);
  }
  return Status::InvalidArgument("--device " + d + ": want cpu, cuda or cuda:N");
}

namespace {

#ifdef EPSERVE_HAVE_CUDA
class CudaParts : public DeviceParts {
 public:
  std::unique_ptr<cuda::DeviceWeights> weights;
  std::unique_ptr<cuda::CudaModel> model;
  std::unique_ptr<cuda::DeviceKvStorage> kv;
};
#endif

}  // namespace

StatusOr<std::unique_ptr<DeviceParts>> AttachDevice(const AttachOptions& o,
                                                    const LoadedModel& loaded, Model* model,
                                                    EngineOptions* eo) {
  if (o.device == "cpu") return std::unique_ptr<DeviceParts>();
  ASSIGN_OR_RETURN(const int index, ParseDeviceIndex(o.device));
  const std::string flag = "--device " + o.device;
  if (o.mtp) return Status::InvalidArgument(flag + ": --mtp on does not run on the GPU yet");
  if (o.compute_fast)
    return Status::InvalidArgument(flag +
                                   ": --compute fast is a CPU mode (the GPU computes "
                                   "exactly from the checkpoint's formats)");
  if (o.requant) return Status::InvalidArgument(flag + ": --requant int8 is a CPU weight format");
#ifndef EPSERVE_HAVE_CUDA
  (void)index;
  (void)loaded;
  (void)model;
  (void)eo;
  return Status::InvalidArgument(flag +
                                 ": this epserve was built without the CUDA backend "
                                 "(no nvcc at build time; docs/testing.md, \"GPU\")");
#else
  const ModelConfig& c = loaded.config;
  if (c.sparse.enabled())
    return Status::InvalidArgument(flag + ": " + c.model_type + "'s sparse attention (index_topk " +
                                   std::to_string(c.sparse.index_topk) +
                                   ") does not run on the CUDA backend yet; run it on the CPU");
  auto used = cuda::Use(index);
  if (!used.ok()) return used.status().WithContext(flag);
  const cuda::DeviceInfo info = *used;
  std::printf("device: %s, %.1f GiB free\n", info.Describe().c_str(),
              static_cast<double>(info.free_bytes) / (1LL << 30));
  auto parts = std::make_unique<CudaParts>();
  const double t0 = NowSeconds();
  auto progress = [t0](int64_t done, int64_t total) {
    const double s = NowSeconds() - t0;
    std::printf("uploading weights: %.2f / %.2f GB (%.1f GB/s)\n", done / 1e9, total / 1e9,
                s > 0 ? done / 1e9 / s : 0.0);
    std::fflush(stdout);
  };
  auto weights = cuda::DeviceWeights::Upload(c, *loaded.weights, progress);
  if (!weights.ok()) return weights.status().WithContext(info.Describe());
  parts->weights = std::move(*weights);
  auto backend = cuda::CudaModel::Create(c, *parts->weights, info);
  if (!backend.ok()) return backend.status().WithContext(info.Describe());
  parts->model = std::move(*backend);
  // The cache pool: --kv-memory bytes, or its share of what the weights left free; without
  // --kv-memory, the caller's eo->num_blocks.
  if (!o.kv_memory.empty()) {
    size_t free = 0, total = 0;
    RETURN_IF_ERROR(cuda::FromCuda(cudaMemGetInfo(&free, &total), info.Describe()));
    ASSIGN_OR_RETURN(const int64_t kv_bytes,
                     ParseKvMemory(o.kv_memory, static_cast<int64_t>(free)));
    eo->num_blocks = KvMemoryBlocks(c, eo->kv_dtype, eo->block_size, kv_bytes, eo->mtp);
    if (eo->num_blocks < 1)
      return Status::InvalidArgument("--kv-memory " + o.kv_memory + " holds not one cache block");
  }
  auto kv = cuda::DeviceKvStorage::Create(c.num_hidden_layers, c.kv_a_dim(), eo->block_size,
                                          eo->num_blocks, eo->kv_dtype);
  if (!kv.ok()) return kv.status().WithContext(info.Describe());
  parts->kv = std::move(*kv);
  eo->kv_storage = parts->kv->view();
  const int64_t positions = eo->num_blocks * eo->block_size;
  const double cache_gb = static_cast<double>(positions) * c.num_hidden_layers * c.kv_a_dim() *
                          KvDTypeBytes(eo->kv_dtype) / 1e9;
  std::printf(
      "device KV cache: %lld blocks x %lld positions (%s, %.2f GB): %lld tokens, %lld "
      "requests of the full context\n",
      static_cast<long long>(eo->num_blocks), static_cast<long long>(eo->block_size),
      KvDTypeName(eo->kv_dtype), cache_gb, static_cast<long long>(positions),
      static_cast<long long>(positions / std::max(1, c.max_position_embeddings)));
  model->SetBackend(parts->model.get());
  return std::unique_ptr<DeviceParts>(std::move(parts));
#endif
}

}  // namespace epserve::tools
