#include "cuda/device_weights.h"

namespace epserve::cuda {

namespace {

class Uploader {
 public:
  Uploader(std::vector<DeviceBuffer>* buffers, int64_t total,
           const DeviceWeights::Progress& progress)
      : buffers_(buffers), total_(total), progress_(progress) {}

  StatusOr<WeightView> View(const WeightView& host, const std::string& name) {
    if (host.empty()) return host;
    if (host.dtype == DType::kI8Packed)
      return Status::InvalidArgument(name +
                                     ": int8-requantized weights (--requant int8) have no "
                                     "CUDA kernel; the GPU reads the checkpoint's FP8/BF16");
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

}  // namespace

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
