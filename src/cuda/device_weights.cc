#include "cuda/device_weights.h"

#include <cmath>

#include "cuda/synthetic.h"

namespace epserve::cuda {

namespace {

class Uploader {
 public:
  Uploader(std::vector<DeviceBuffer>* buffers, int64_t total,
           const DeviceWeights::Progress& progress)
      : buffers_(buffers), total_(total), progress_(progress) {}

  StatusOr<WeightView> View(const WeightView& host, const std::string& name) {
    if (host.empty()) return host;
    switch (host.dtype) {  // what cuda/matmul.cu's kernels read
      case DType::kF32:
      case DType::kBF16:
      case DType::kF8E4M3:
        break;
      case DType::kI8Packed:
        return Status::InvalidArgument(name +
                                       ": int8-requantized weights (--requant int8) have no "
                                       "CUDA kernel; the GPU reads the checkpoint's FP8/BF16");
      case DType::kF4E2M1:  // its UE8M0 scales (scale_ue8m0) are not uploaded either
        return Status::InvalidArgument(name + ": FP4 (F4_E2M1) weights have no CUDA kernel");
      case DType::kF8E8M0:
      case DType::kI8:
      case DType::kI32:
      case DType::kI64:
        return Status::InvalidArgument(name + ": dtype " + DTypeName(host.dtype) +
                                       " is not a weight's (F32, BF16 or F8_E4M3)");
    }
    WeightView v = host;
    ASSIGN_OR_RETURN(v.data, Bytes(host.data, host.DataBytes(), name));
    if (host.ScaleBytes() > 0) {
      ASSIGN_OR_RETURN(const void* s, Bytes(host.scale, host.ScaleBytes(), name + " scales"));
      v.scale = static_cast<const float*>(s);
    }
    return v;
  }
  StatusOr<const float*> Floats(const std::vector<float>& host, const std::string& name) {
    if (host.empty()) return static_cast<const float*>(nullptr);
    ASSIGN_OR_RETURN(const void* p,
                     Bytes(host.data(), static_cast<int64_t>(host.size() * sizeof(float)), name));
    return static_cast<const float*>(p);
  }
  int64_t done() const { return done_; }

 private:
  StatusOr<const void*> Bytes(const void* host, int64_t bytes, const std::string& name) {
    DeviceBuffer b;
    RETURN_IF_ERROR(b.Upload(host, bytes, name).WithContext("uploading " + name));
    done_ += bytes;
    if (progress_ && (done_ - reported_ >= (int64_t{1} << 30) || done_ == total_)) {
      progress_(done_, total_);
      reported_ = done_;
    }
    buffers_->push_back(std::move(b));
    return static_cast<const void*>(buffers_->back().data());
  }
  std::vector<DeviceBuffer>* buffers_;
  int64_t total_, done_ = 0, reported_ = 0;
  const DeviceWeights::Progress& progress_;
};

StatusOr<DeviceMlp> Mlp(Uploader& up, const MlpWeights& m, const std::string& name) {
  DeviceMlp d;
  ASSIGN_OR_RETURN(d.gate, up.View(m.gate, name + " gate_proj"));
  ASSIGN_OR_RETURN(d.up, up.View(m.up, name + " up_proj"));
  ASSIGN_OR_RETURN(d.down, up.View(m.down, name + " down_proj"));
  return d;
}

// Makes DeviceWeights::Synthetic's tensors one by one, or with no buffers only counts their
// bytes (the first pass, for the progress total).
class Maker {
 public:
  Maker(std::vector<DeviceBuffer>* buffers, WeightDType dtype, uint64_t seed, int64_t total,
        DeviceWeights::Progress progress)
      : buffers_(buffers),
        dtype_(dtype),
        seed_(seed),
        total_(total),
        progress_(std::move(progress)) {}

  enum class Kind { kProjection, kBf16 };  // kProjection: FP8 when the model is FP8
  // [rows, cols] uniform with standard deviation `std` (1/sqrt(cols) when 0).
  StatusOr<WeightView> Matrix(int64_t rows, int64_t cols, Kind kind, const std::string& name,
                              float std = 0) {
    const float half_width =
        (std > 0 ? std : 1.0f / std::sqrt(static_cast<float>(cols))) * std::sqrt(3.0f);
    const bool fp8 = kind == Kind::kProjection && dtype_ == WeightDType::kFP8;
    WeightView v{.dtype = fp8 ? DType::kF8E4M3 : DType::kBF16, .rows = rows, .cols = cols};
    const int64_t stream = next_stream_++;
    ASSIGN_OR_RETURN(v.data, Make(v.DataBytes(), name,
                                  {.n = rows * cols,
                                   .format = fp8 ? FillFormat::kFP8 : FillFormat::kBF16,
                                   .stream = static_cast<uint64_t>(stream),
                                   .half_width = half_width}));
    if (fp8) {
      // One scale for every tile: the tile's largest value (~half_width) maps to 448.
      ASSIGN_OR_RETURN(const void* s, Make(v.ScaleBytes(), name + " scales",
                                           {.n = v.ScaleRows() * v.ScaleCols(),
                                            .mean = half_width / kFp8E4M3Max,
                                            .half_width = 0}));
      v.scale = static_cast<const float*>(s);
    }
    return v;
  }
  // n f32 values uniform around `mean`.
  StatusOr<const float*> Vector(int64_t n, float mean, float std, const std::string& name) {
    const int64_t stream = next_stream_++;
    ASSIGN_OR_RETURN(const void* p, Make(n * 4, name,
                                         {.n = n,
                                          .stream = static_cast<uint64_t>(stream),
                                          .mean = mean,
                                          .half_width = std * std::sqrt(3.0f)}));
    return static_cast<const float*>(p);
  }
  int64_t done() const { return done_; }

 private:
  StatusOr<const void*> Make(int64_t bytes, const std::string& name, FillArgs fill) {
    done_ += bytes;
    if (buffers_ == nullptr) return static_cast<const void*>(&done_);  // counting: any non-null
    DeviceBuffer b;
    RETURN_IF_ERROR(b.Allocate(bytes, name).WithContext("making " + name));
    fill.out = b.data();
    fill.seed = seed_;
    RETURN_IF_ERROR(FillUniform(fill, nullptr).WithContext("making " + name));
    if (progress_ && (done_ - reported_ >= (int64_t{1} << 30) || done_ == total_)) {
      RETURN_IF_ERROR(FromCuda(cudaDeviceSynchronize(), "making " + name));
      progress_(done_, total_);
      reported_ = done_;
    }
    buffers_->push_back(std::move(b));
    return static_cast<const void*>(buffers_->back().data());
  }
  std::vector<DeviceBuffer>* buffers_;
  WeightDType dtype_;
  uint64_t seed_;
  int64_t total_, done_ = 0, reported_ = 0, next_stream_ = 0;
  DeviceWeights::Progress progress_;
};

StatusOr<DeviceMlp> MakeMlp(Maker& m, int64_t hidden, int64_t width, const std::string& name) {
  DeviceMlp d;
  ASSIGN_OR_RETURN(d.gate, m.Matrix(width, hidden, Maker::Kind::kProjection, name + " gate_proj"));
  ASSIGN_OR_RETURN(d.up, m.Matrix(width, hidden, Maker::Kind::kProjection, name + " up_proj"));
  ASSIGN_OR_RETURN(d.down, m.Matrix(hidden, width, Maker::Kind::kProjection, name + " down_proj"));
  return d;
}

// Every tensor of `c` in a fixed order (the order numbers the random streams).
Status MakeAll(const ModelConfig& c, Maker& m, DeviceWeights* d) {
  using K = Maker::Kind;
  const int64_t H = c.hidden_size, heads = c.num_attention_heads;
  ASSIGN_OR_RETURN(d->embed, m.Matrix(c.vocab_size, H, K::kBf16, "embed_tokens", 1.0f));
  ASSIGN_OR_RETURN(d->lm_head, m.Matrix(c.vocab_size, H, K::kBf16, "lm_head"));
  ASSIGN_OR_RETURN(d->final_norm, m.Vector(H, 1.0f, 0.1f, "norm"));
  d->layers.clear();
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string name = "layer " + std::to_string(l);
    DeviceLayer& dl = d->layers.emplace_back();
    ASSIGN_OR_RETURN(dl.input_norm, m.Vector(H, 1.0f, 0.1f, name + " input_layernorm"));
    ASSIGN_OR_RETURN(dl.post_norm, m.Vector(H, 1.0f, 0.1f, name + " post_attention_layernorm"));
    if (c.q_lora_rank > 0) {
      ASSIGN_OR_RETURN(dl.q_a, m.Matrix(c.q_lora_rank, H, K::kProjection, name + " q_a_proj"));
      ASSIGN_OR_RETURN(dl.q_a_norm, m.Vector(c.q_lora_rank, 1.0f, 0.1f, name + " q_a_layernorm"));
      ASSIGN_OR_RETURN(dl.q_b, m.Matrix(heads * c.qk_head_dim(), c.q_lora_rank, K::kProjection,
                                        name + " q_b_proj"));
    } else {
      ASSIGN_OR_RETURN(dl.q,
                       m.Matrix(heads * c.qk_head_dim(), H, K::kProjection, name + " q_proj"));
    }
    ASSIGN_OR_RETURN(dl.kv_a,
                     m.Matrix(c.kv_a_dim(), H, K::kProjection, name + " kv_a_proj_with_mqa"));
    ASSIGN_OR_RETURN(dl.kv_a_norm, m.Vector(c.kv_lora_rank, 1.0f, 0.1f, name + " kv_a_layernorm"));
    ASSIGN_OR_RETURN(dl.kv_b, m.Matrix(heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank,
                                       K::kProjection, name + " kv_b_proj"));
    ASSIGN_OR_RETURN(dl.o, m.Matrix(H, heads * c.v_head_dim, K::kProjection, name + " o_proj"));
    if (!c.IsMoeLayer(l)) {
      ASSIGN_OR_RETURN(dl.dense, MakeMlp(m, H, c.intermediate_size, name + " mlp"));
      continue;
    }
    dl.moe = true;
    ASSIGN_OR_RETURN(dl.router, m.Matrix(c.n_routed_experts, H, K::kBf16, name + " gate"));
    if (c.topk_method == kernels::TopkMethod::kNoauxTc) {
      ASSIGN_OR_RETURN(dl.score_bias, m.Vector(c.n_routed_experts, 0.0f, 0.02f,
                                               name + " e_score_correction_bias"));
    }
    for (int e = 0; e < c.n_routed_experts; ++e) {
      ASSIGN_OR_RETURN(DeviceMlp x, MakeMlp(m, H, c.moe_intermediate_size,
                                            name + " expert " + std::to_string(e)));
      dl.experts.push_back(x);
    }
    if (c.n_shared_experts > 0) {
      ASSIGN_OR_RETURN(dl.shared,
                       MakeMlp(m, H, int64_t{c.moe_intermediate_size} * c.n_shared_experts,
                               name + " shared_experts"));
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<DeviceWeights>> DeviceWeights::Synthetic(const ModelConfig& config,
                                                                  WeightDType dtype, uint64_t seed,
                                                                  const Progress& progress) {
  RETURN_IF_ERROR(config.Validate("synthetic weights"));
  auto d = std::make_unique<DeviceWeights>();
  Maker count(nullptr, dtype, seed, 0, nullptr);
  RETURN_IF_ERROR(MakeAll(config, count, d.get()));
  Maker make(&d->buffers_, dtype, seed, count.done(), progress);
  RETURN_IF_ERROR(MakeAll(config, make, d.get()));
  RETURN_IF_ERROR(FromCuda(cudaDeviceSynchronize(), "filling the synthetic weights"));
  d->bytes = make.done();
  return d;
}

StatusOr<int64_t> DeviceWeights::SyntheticBytes(const ModelConfig& config, WeightDType dtype) {
  RETURN_IF_ERROR(config.Validate("synthetic weights"));
  DeviceWeights d;
  Maker count(nullptr, dtype, 0, 0, nullptr);
  RETURN_IF_ERROR(MakeAll(config, count, &d));
  return count.done();
}

StatusOr<std::unique_ptr<DeviceWeights>> DeviceWeights::Upload(const ModelConfig& config,
                                                               const ModelWeights& host,
                                                               const Progress& progress) {
  auto d = std::make_unique<DeviceWeights>();
  int64_t total = host.embed.Bytes();
  for (const WeightView* v : host.StreamedViews()) total += v->Bytes();
  Uploader up(&d->buffers_, total, progress);
  ASSIGN_OR_RETURN(d->embed, up.View(host.embed, "embed_tokens"));
  ASSIGN_OR_RETURN(d->lm_head, up.View(host.lm_head, "lm_head"));
  ASSIGN_OR_RETURN(d->final_norm, up.Floats(host.final_norm, "norm"));
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    const LayerWeights& h = host.layers[l];
    const std::string name = "layer " + std::to_string(l);
    DeviceLayer& dl = d->layers.emplace_back();
    ASSIGN_OR_RETURN(dl.input_norm, up.Floats(h.input_norm, name + " input_layernorm"));
    ASSIGN_OR_RETURN(dl.post_norm, up.Floats(h.post_norm, name + " post_attention_layernorm"));
    ASSIGN_OR_RETURN(dl.q_a_norm, up.Floats(h.attn.q_a_norm, name + " q_a_layernorm"));
    ASSIGN_OR_RETURN(dl.kv_a_norm, up.Floats(h.attn.kv_a_norm, name + " kv_a_layernorm"));
    ASSIGN_OR_RETURN(dl.q_a, up.View(h.attn.q_a, name + " q_a_proj"));
    ASSIGN_OR_RETURN(dl.q_b, up.View(h.attn.q_b, name + " q_b_proj"));
    ASSIGN_OR_RETURN(dl.q, up.View(h.attn.q, name + " q_proj"));
    ASSIGN_OR_RETURN(dl.kv_a, up.View(h.attn.kv_a, name + " kv_a_proj_with_mqa"));
    ASSIGN_OR_RETURN(dl.kv_b, up.View(h.attn.kv_b, name + " kv_b_proj"));
    ASSIGN_OR_RETURN(dl.o, up.View(h.attn.o, name + " o_proj"));
    if (!h.moe) {
      ASSIGN_OR_RETURN(dl.dense, Mlp(up, h.dense, name + " mlp"));
      continue;
    }
    dl.moe = true;
    ASSIGN_OR_RETURN(dl.router, up.View(h.moe->router, name + " gate"));
    ASSIGN_OR_RETURN(dl.score_bias,
                     up.Floats(h.moe->score_bias, name + " e_score_correction_bias"));
    for (size_t e = 0; e < h.moe->experts.size(); ++e) {
      if (h.moe->experts[e].empty())
        return Status::InvalidArgument(name + " expert " + std::to_string(e) +
                                       " is not loaded; the GPU backend holds every expert");
      ASSIGN_OR_RETURN(DeviceMlp m,
                       Mlp(up, h.moe->experts[e], name + " expert " + std::to_string(e)));
      dl.experts.push_back(m);
    }
    ASSIGN_OR_RETURN(dl.shared, Mlp(up, h.moe->shared, name + " shared_experts"));
  }
  d->bytes = up.done();
  return d;
}

}  // namespace epserve::cuda
