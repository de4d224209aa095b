#include "model/v4/v4_weights.h"

#include <cstring>

#include "tensor/dtype.h"

namespace epserve::v4 {

namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string r = "[";
  for (size_t i = 0; i < shape.size(); ++i) r += (i ? ", " : "") + std::to_string(shape[i]);
  return r + "]";
}

}  // namespace

class V4Binder {
 public:
  explicit V4Binder(V4Weights* w) : w_(w), ck_(*w->ck_) {}

  Status Error(const std::string& name, const std::string& what) const {
    return Status::DataLoss(ck_.dir() + ": tensor " + name + ": " + what);
  }

  StatusOr<const TensorInfo*> Get(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorInfo* t = ck_.Find(name);
    if (t == nullptr) return Error(name, "missing (want " + ShapeString(shape) + ")");
    if (t->shape != shape)
      return Error(name, "shape " + t->ShapeString() + ", want " + ShapeString(shape));
    return t;
  }

  // A BF16 or F32 tensor of `shape` as floats.
  Status Vec(const std::string& name, const std::vector<int64_t>& shape, std::vector<float>* out) {
    ASSIGN_OR_RETURN(const TensorInfo* t, Get(name, shape));
    out->resize(t->NumElements());
    if (t->dtype == DType::kF32) {
      std::memcpy(out->data(), t->data, out->size() * 4);
    } else if (t->dtype == DType::kBF16) {
      for (size_t i = 0; i < out->size(); ++i) {
        uint16_t b;
        std::memcpy(&b, t->data + 2 * i, 2);
        (*out)[i] = Bf16ToF32(b);
      }
    } else {
      return Error(name, std::string("dtype ") + DTypeName(t->dtype) + ", want BF16 or F32");
    }
    return Status::Ok();
  }

  // The checked UE8M0 scale companion of `name` ("<m>.weight" -> "<m>.scale").
  StatusOr<const TensorInfo*> Scale(const std::string& name, const std::vector<int64_t>& shape) {
    const std::string sname = name.substr(0, name.size() - 6) + "scale";
    if (!name.ends_with(".weight") || ck_.Find(sname) == nullptr)
      return Error(name, "quantized weight without its " + sname);
    ASSIGN_OR_RETURN(const TensorInfo* s, Get(sname, shape));
    if (s->dtype != DType::kF8E8M0)
      return Error(sname, std::string("dtype ") + DTypeName(s->dtype) + ", want F8_E8M0");
    return s;
  }

  // A projection [rows, cols]: F32, BF16, F8_E4M3 (+ 128x128 UE8M0 scales) or I8 packed FP4
  // (+ UE8M0 per 32 inputs: a kF4E2M1 view into the mapping, or owned BF16 with Fp4::kBf16).
  Status Matrix(const std::string& name, int64_t rows, int64_t cols, WeightView* out) {
    const TensorInfo* t = ck_.Find(name);
    if (t == nullptr) return Error(name, "missing (want " + ShapeString({rows, cols}) + ")");
    *out = WeightView{.rows = rows, .cols = cols};
    if (t->dtype == DType::kI8) {
      if (cols % kFp4BlockSize != 0)
        return Error(name, "FP4 weight with " + std::to_string(cols) + " inputs");
      ASSIGN_OR_RETURN(t, Get(name, {rows, cols / 2}));
      ASSIGN_OR_RETURN(const TensorInfo* s, Scale(name, {rows, cols / kFp4BlockSize}));
      if (w_->options_.fp4 == V4LoadOptions::Fp4::kNative) {
        out->dtype = DType::kF4E2M1;
        out->data = t->data;
        out->scale_ue8m0 = s->data;
        return Status::Ok();
      }
      auto& bf = w_->bf16_.emplace_back(rows * cols);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < cols; ++j) {
          const uint8_t byte = t->data[r * (cols / 2) + j / 2];
          const uint8_t nib = (j % 2 == 0) ? (byte & 0xf) : (byte >> 4);
          const float v = kFp4E2M1ToF32[nib] * Ue8m0ToF32(s->data[r * (cols / 32) + j / 32]);
          bf[r * cols + j] = F32ToBf16(v);
          if (Bf16ToF32(bf[r * cols + j]) != v && v == v)
            return Error(name, "FP4 value not exact in BF16 (scale out of range)");
        }
      }
      out->dtype = DType::kBF16;
      out->data = bf.data();
      return Status::Ok();
    }
    ASSIGN_OR_RETURN(t, Get(name, {rows, cols}));
    if (t->dtype == DType::kBF16) {
      out->dtype = DType::kBF16;
      out->data = t->data;
    } else if (t->dtype == DType::kF32) {
      auto& f = w_->f32_.emplace_back(rows * cols);
      std::memcpy(f.data(), t->data, rows * cols * 4);
      out->dtype = DType::kF32;
      out->data = f.data();
    } else if (t->dtype == DType::kF8E4M3) {
      ASSIGN_OR_RETURN(const TensorInfo* s, Scale(name, {(rows + 127) / 128, (cols + 127) / 128}));
      auto& sc = w_->scales_.emplace_back(s->NumElements());
      for (size_t i = 0; i < sc.size(); ++i) sc[i] = Ue8m0ToF32(s->data[i]);
      out->dtype = DType::kF8E4M3;
      out->data = t->data;
      out->scale = sc.data();
    } else {
      return Error(name, std::string("dtype ") + DTypeName(t->dtype) +
                             ", want F8_E4M3, I8 (FP4), BF16 or F32");
    }
    return Status::Ok();
  }

  Status Hc(const std::string& p, const std::string& kind, int64_t mix, int64_t num_scales,
            V4Hc* hc) {
    const V4Config& c = w_->config_;
    RETURN_IF_ERROR(Matrix(p + "hc_" + kind + "_fn", mix, c.hc_mult * c.hidden_size, &hc->fn));
    if (hc->fn.dtype != DType::kF32) return Error(p + "hc_" + kind + "_fn", "want F32");
    RETURN_IF_ERROR(Vec(p + "hc_" + kind + "_base", {mix}, &hc->base));
    return Vec(p + "hc_" + kind + "_scale", {num_scales}, &hc->scale);
  }

  Status Compressor(const std::string& p, int ratio, int64_t d, V4Compressor* out) {
    const V4Config& c = w_->config_;
    const int64_t cd = V4Config::CompressFactor(ratio) * d;
    RETURN_IF_ERROR(Matrix(p + ".wkv.weight", cd, c.hidden_size, &out->wkv));
    RETURN_IF_ERROR(Matrix(p + ".wgate.weight", cd, c.hidden_size, &out->wgate));
    RETURN_IF_ERROR(Vec(p + ".ape", {ratio, cd}, &out->ape));
    return Vec(p + ".norm.weight", {d}, &out->norm);
  }

  Status Expert(const std::string& p, MlpWeights* e) {
    const V4Config& c = w_->config_;
    e->swiglu_limit = static_cast<float>(c.swiglu_limit);
    RETURN_IF_ERROR(Matrix(p + ".w1.weight", c.moe_inter, c.hidden_size, &e->gate));
    RETURN_IF_ERROR(Matrix(p + ".w2.weight", c.hidden_size, c.moe_inter, &e->down));
    return Matrix(p + ".w3.weight", c.moe_inter, c.hidden_size, &e->up);
  }

  Status Layer(int l, V4Layer* L) {
    const V4Config& c = w_->config_;
    const std::string p = "layers." + std::to_string(l) + ".";
    const int64_t D = c.hidden_size;
    L->ratio = c.Ratio(l);
    RETURN_IF_ERROR(Vec(p + "attn_norm.weight", {D}, &L->attn_norm));
    RETURN_IF_ERROR(Vec(p + "ffn_norm.weight", {D}, &L->ffn_norm));
    RETURN_IF_ERROR(Hc(p, "attn", c.HcMixWidth(), 3, &L->hc_attn));
    RETURN_IF_ERROR(Hc(p, "ffn", c.HcMixWidth(), 3, &L->hc_ffn));
    const std::string a = p + "attn.";
    RETURN_IF_ERROR(Matrix(a + "wq_a.weight", c.q_lora_rank, D, &L->wq_a));
    RETURN_IF_ERROR(Vec(a + "q_norm.weight", {c.q_lora_rank}, &L->q_norm));
    RETURN_IF_ERROR(Matrix(a + "wq_b.weight", c.QWidth(), c.q_lora_rank, &L->wq_b));
    RETURN_IF_ERROR(Matrix(a + "wkv.weight", c.head_dim, D, &L->wkv));
    RETURN_IF_ERROR(Vec(a + "kv_norm.weight", {c.head_dim}, &L->kv_norm));
    RETURN_IF_ERROR(Vec(a + "attn_sink", {c.num_heads}, &L->attn_sink));
    RETURN_IF_ERROR(Matrix(a + "wo_a.weight", c.o_groups * c.o_lora_rank, c.OGroupIn(), &L->wo_a));
    RETURN_IF_ERROR(Matrix(a + "wo_b.weight", D, c.o_groups * c.o_lora_rank, &L->wo_b));
    if (L->ratio != 0)
      RETURN_IF_ERROR(Compressor(a + "compressor", L->ratio, c.head_dim, &L->compressor));
    if (L->ratio == 4) {
      RETURN_IF_ERROR(Matrix(a + "indexer.wq_b.weight", c.index_heads * c.index_dim, c.q_lora_rank,
                             &L->index_wq_b));
      RETURN_IF_ERROR(
          Matrix(a + "indexer.weights_proj.weight", c.index_heads, D, &L->index_weights_proj));
      RETURN_IF_ERROR(Compressor(a + "indexer.compressor", 4, c.index_dim, &L->index_compressor));
    }
    const std::string f = p + "ffn.";
    RETURN_IF_ERROR(Matrix(f + "gate.weight", c.num_experts, D, &L->gate));
    if (l < c.num_hash_layers) {
      const std::string name = f + "gate.tid2eid";
      ASSIGN_OR_RETURN(const TensorInfo* t, Get(name, {c.vocab_size, c.experts_per_token}));
      if (t->dtype != DType::kI64 && t->dtype != DType::kI32)
        return Error(name, std::string("dtype ") + DTypeName(t->dtype) + ", want I64 or I32");
      L->tid2eid.resize(t->NumElements());
      for (size_t i = 0; i < L->tid2eid.size(); ++i) {
        int64_t v = 0;
        if (t->dtype == DType::kI64) {
          std::memcpy(&v, t->data + 8 * i, 8);
        } else {
          int32_t v32;
          std::memcpy(&v32, t->data + 4 * i, 4);
          v = v32;
        }
        if (v < 0 || v >= c.num_experts)
          return Error(name, "expert id " + std::to_string(v) + " out of range");
        L->tid2eid[i] = static_cast<int32_t>(v);
      }
    } else {
      RETURN_IF_ERROR(Vec(f + "gate.bias", {c.num_experts}, &L->gate_bias));
    }
    L->experts.resize(c.num_experts);
    for (int e = 0; e < c.num_experts; ++e)
      RETURN_IF_ERROR(Expert(f + "experts." + std::to_string(e), &L->experts[e]));
    return Expert(f + "shared_experts", &L->shared);
  }

  Status All() {
    const V4Config& c = w_->config_;
    RETURN_IF_ERROR(Matrix("embed.weight", c.vocab_size, c.hidden_size, &w_->embed_));
    RETURN_IF_ERROR(Matrix("head.weight", c.vocab_size, c.hidden_size, &w_->head_));
    RETURN_IF_ERROR(Vec("norm.weight", {c.hidden_size}, &w_->norm_));
    RETURN_IF_ERROR(Hc("", "head", c.hc_mult, 1, &w_->hc_head_));
    w_->layers_.resize(c.num_layers);
    for (int l = 0; l < c.num_layers; ++l) RETURN_IF_ERROR(Layer(l, &w_->layers_[l]));
    return Status::Ok();
  }

 private:
  V4Weights* w_;
  const Checkpoint& ck_;
};

StatusOr<std::unique_ptr<V4Weights>> V4Weights::Load(const std::string& dir,
                                                     const V4LoadOptions& options) {
  auto w = std::unique_ptr<V4Weights>(new V4Weights());
  w->options_ = options;
  ASSIGN_OR_RETURN(w->ck_, Checkpoint::Open(dir));
  ASSIGN_OR_RETURN(w->config_, ParseV4Config(w->ck_->config_text(), dir + "/config.json"));
  V4Binder binder(w.get());
  RETURN_IF_ERROR(binder.All());
  return w;
}

}  // namespace epserve::v4
