#include "model/weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <unordered_set>

#include "io/mapped_file.h"
#include "kernels/matmul_i8.h"
#include "model/tensor_names.h"

namespace epserve {

namespace {

// Linear weights: F32, BF16, or F8_E4M3 (with scales); everything else F32 or BF16. V4's storage
// types (F8_E8M0, I8, I32, I64) are no V2/V3 tensor's.
bool DTypeAllowed(TensorRole role, DType dt) {
  if (dt == DType::kF32 || dt == DType::kBF16) return true;
  return role == TensorRole::kLinear && dt == DType::kF8E4M3;
}

std::string Where(const TensorInfo& t) { return t.file + ": tensor " + t.name; }

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// Whether `name` belongs to one of the MTP modules (model.layers.{num_hidden_layers + i}.*).
bool IsMtpTensor(const ModelConfig& c, const std::string& name) {
  for (int i = 0; i < c.num_nextn_predict_layers; ++i)
    if (name.starts_with(LayerPrefix(c.num_hidden_layers + i))) return true;
  return false;
}

class Binder {
 public:
  Binder(const Checkpoint& ck, ModelWeights* w) : ck_(ck), w_(w) {}

  // Validates every expected tensor and that nothing else is present. With Mtp::kSkip the MTP
  // modules' tensors are not expected, and ignored where present.
  Status ValidateAll(const std::vector<TensorSpec>& specs, const ModelConfig& c,
                     LoadOptions::Mtp mtp) {
    std::set<std::string> expected;
    for (const auto& s : specs) {
      const bool of_mtp = s.layer >= c.num_hidden_layers;
      if (of_mtp && mtp == LoadOptions::Mtp::kSkip) continue;
      const TensorInfo* t = ck_.Find(s.name);
      if (t == nullptr)
        return Status::DataLoss(ck_.listing_path() + ": missing tensor " + s.name + " (want " +
                                ShapeStr(s.shape) + ")" +
                                (of_mtp ? ", of the MTP module (num_nextn_predict_layers is " +
                                              std::to_string(c.num_nextn_predict_layers) +
                                              "); --mtp off loads the model without it"
                                        : ""));
      if (t->shape != s.shape)
        return Status::DataLoss(Where(*t) + ": shape " + t->ShapeString() + ", want " +
                                ShapeStr(s.shape));
      if (!DTypeAllowed(s.role, t->dtype))
        return Status::DataLoss(
            Where(*t) + ": dtype " + DTypeName(t->dtype) + " is not allowed here (want " +
            (s.role == TensorRole::kLinear ? "F8_E4M3, " : "") + "BF16 or F32)");
      expected.insert(s.name);
      if (s.role == TensorRole::kLinear && t->dtype == DType::kF8E4M3) {
        const std::string sname = s.name + "_scale_inv";
        const TensorInfo* sc = ck_.Find(sname);
        std::vector<int64_t> want = {(s.shape[0] + 127) / 128, (s.shape[1] + 127) / 128};
        if (sc == nullptr) return Status::DataLoss(Where(*t) + ": F8_E4M3 weight without " + sname);
        if (sc->dtype != DType::kF32)
          return Status::DataLoss(Where(*sc) + ": dtype " + DTypeName(sc->dtype) + ", want F32");
        if (sc->shape != want)
          return Status::DataLoss(Where(*sc) + ": shape " + sc->ShapeString() + ", want " +
                                  ShapeStr(want));
        expected.insert(sname);
      }
    }
    for (const auto& [name, info] : ck_.tensors())
      if (!expected.count(name) && !(mtp == LoadOptions::Mtp::kSkip && IsMtpTensor(c, name)))
        return Status::DataLoss(Where(*info) +
                                ": unexpected tensor (not part of this config's model)");
    return Status::Ok();
  }

  // The bytes (data and scales) of the checkpoint's MTP-module tensors.
  int64_t MtpBytes(const ModelConfig& c) const {
    int64_t bytes = 0;
    for (const auto& [name, info] : ck_.tensors())
      if (IsMtpTensor(c, name)) bytes += static_cast<int64_t>(info->num_bytes);
    return bytes;
  }

  std::vector<float> Vector(const std::string& name) {
    const TensorInfo* t = ck_.Find(name);
    std::vector<float> v(t->NumElements());
    for (size_t i = 0; i < v.size(); ++i) {
      if (t->dtype == DType::kF32) {
        std::memcpy(&v[i], t->data + 4 * i, 4);
      } else {
        uint16_t b;
        std::memcpy(&b, t->data + 2 * i, 2);
        v[i] = Bf16ToF32(b);
      }
    }
    return v;
  }

  WeightView Matrix(const std::string& name) {
    const TensorInfo* t = ck_.Find(name);
    WeightView v{.dtype = t->dtype,
                 .rows = t->shape[0],
                 .cols = t->shape[1],
                 .data = Aligned(*t, DTypeSize(t->dtype))};
    if (t->dtype == DType::kF8E4M3) {
      const TensorInfo* s = ck_.Find(name + "_scale_inv");
      v.scale = static_cast<const float*>(Aligned(*s, 4));
    }
    return v;
  }

 private:
  const void* Aligned(const TensorInfo& t, size_t align) {
    if (reinterpret_cast<uintptr_t>(t.data) % align == 0) return t.data;
    w_->owned.emplace_back(t.data, t.data + t.num_bytes);
    return w_->owned.back().data();
  }
  const Checkpoint& ck_;
  ModelWeights* w_;
};

MlpWeights BindMlp(Binder& b, const std::string& p) {
  return MlpWeights{b.Matrix(p + "gate_proj.weight"), b.Matrix(p + "up_proj.weight"),
                    b.Matrix(p + "down_proj.weight")};
}

LayerWeights BindLayer(Binder& b, const ModelConfig& c, int l, const LoadOptions& opt) {
  const std::string p = LayerPrefix(l), a = p + "self_attn.";
  LayerWeights w;
  w.input_norm = b.Vector(p + "input_layernorm.weight");
  w.post_norm = b.Vector(p + "post_attention_layernorm.weight");
  if (c.q_lora_rank > 0) {
    w.attn.q_a = b.Matrix(a + "q_a_proj.weight");
    w.attn.q_a_norm = b.Vector(a + "q_a_layernorm.weight");
    w.attn.q_b = b.Matrix(a + "q_b_proj.weight");
  } else {
    w.attn.q = b.Matrix(a + "q_proj.weight");
  }
  w.attn.kv_a = b.Matrix(a + "kv_a_proj_with_mqa.weight");
  w.attn.kv_a_norm = b.Vector(a + "kv_a_layernorm.weight");
  w.attn.kv_b = b.Matrix(a + "kv_b_proj.weight");
  w.attn.o = b.Matrix(a + "o_proj.weight");
  if (c.sparse.enabled()) {
    const std::string x = a + "indexer.";
    w.attn.indexer.wq_b = b.Matrix(x + "wq_b.weight");
    w.attn.indexer.wk = b.Matrix(x + "wk.weight");
    w.attn.indexer.k_norm = b.Vector(x + "k_norm.weight");
    w.attn.indexer.k_norm_bias = b.Vector(x + "k_norm.bias");
    w.attn.indexer.weights_proj = b.Matrix(x + "weights_proj.weight");
  }
  if (!c.IsMoeLayer(l)) {
    w.dense = BindMlp(b, p + "mlp.");
    return w;
  }
  w.moe = std::make_unique<MoeWeights>();
  w.moe->router = b.Matrix(p + "mlp.gate.weight");
  if (c.topk_method == kernels::TopkMethod::kNoauxTc)
    w.moe->score_bias = b.Vector(p + "mlp.gate.e_score_correction_bias");
  w.moe->experts.resize(c.n_routed_experts);
  for (int e = 0; e < c.n_routed_experts; ++e)
    if (!opt.want_expert || opt.want_expert(l, e))
      w.moe->experts[e] = BindMlp(b, p + "mlp.experts." + std::to_string(e) + ".");
  if (c.n_shared_experts > 0) w.moe->shared = BindMlp(b, p + "mlp.shared_experts.");
  return w;
}

size_t Align64(int64_t n) { return static_cast<size_t>((n + 63) / 64 * 64); }

void AddLayerViews(const LayerWeights& l, std::vector<const WeightView*>& out) {
  auto add = [&](const WeightView& v) {
    if (!v.empty()) out.push_back(&v);
  };
  auto add_mlp = [&](const MlpWeights& m) {
    add(m.gate);
    add(m.up);
    add(m.down);
  };
  for (const WeightView* v :
       {&l.attn.q_a, &l.attn.q_b, &l.attn.q, &l.attn.kv_a, &l.attn.kv_b, &l.attn.o,
        &l.attn.indexer.wq_b, &l.attn.indexer.wk, &l.attn.indexer.weights_proj})
    add(*v);
  add_mlp(l.dense);
  if (l.moe) {
    add(l.moe->router);
    add_mlp(l.moe->shared);
    for (const MlpWeights& e : l.moe->experts) add_mlp(e);
  }
}

// The views LoadOptions::Requant::kInt8 requantizes: all streamed ones but kv_b and the router.
std::unordered_set<const WeightView*> RequantizedViews(const ModelWeights& w) {
  std::unordered_set<const WeightView*> out;
  for (const WeightView* v : w.StreamedViews()) out.insert(v);
  auto skip = [&](const LayerWeights& l) {
    out.erase(&l.attn.kv_b);
    if (l.moe) out.erase(&l.moe->router);
    // The indexer only ranks positions; its projections stay as stored, as DeepSeek runs them.
    for (const WeightView* v :
         {&l.attn.indexer.wq_b, &l.attn.indexer.wk, &l.attn.indexer.weights_proj})
      out.erase(v);
  };
  for (const LayerWeights& l : w.layers) skip(l);
  for (const MtpWeights& m : w.mtp) skip(m.layer);
  return out;
}

// Bytes a view takes once copied (as int8 when `requant`), data and scales each 64-aligned.
size_t CopiedBytes(const WeightView& v, bool requant) {
  const WeightView t = requant ? kernels::I8PackedShape(v) : v;
  return Align64(t.DataBytes()) + Align64(t.ScaleBytes());
}

// Copies (or packs as int8) one view to `data` (CopiedBytes of room) and points it there.
void CopyView(WeightView* v, uint8_t* data, bool requant) {
  if (requant) {
    const WeightView t = kernels::I8PackedShape(*v);
    *v = kernels::PackWeightI8(*v, data, reinterpret_cast<float*>(data + Align64(t.DataBytes())));
    return;
  }
  std::memcpy(data, v->data, v->DataBytes());
  v->data = data;
  if (v->ScaleBytes() > 0) {
    uint8_t* scale = data + Align64(v->DataBytes());
    std::memcpy(scale, v->scale, v->ScaleBytes());
    v->scale = reinterpret_cast<const float*>(scale);
  }
}

// Copies every streamed view (data and scales) into one anonymous mapping advised for huge
// pages and points the views at the copies; the views in `requant` are packed as int8 instead
// (on all hardware threads: a large checkpoint takes minutes on one).
Status CopyToHugePages(ModelWeights& w, const std::unordered_set<const WeightView*>& requant) {
  std::vector<const WeightView*> views = w.StreamedViews();
  size_t total = 0;
  for (const WeightView* v : views) total += CopiedBytes(*v, requant.count(v) > 0);
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t size = std::max<size_t>(kHuge, (total + kHuge - 1) / kHuge * kHuge);
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return Status::IoError("cannot allocate " + std::to_string(size >> 20) +
                           " MiB for the weights: " + std::strerror(errno));
  ::madvise(p, size, MADV_HUGEPAGE);  // advisory: without THP the copy still works on 4 KB pages
  w.copied =
      std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [size](uint8_t* q) { ::munmap(q, size); });
  std::vector<uint8_t*> dst(views.size());
  uint8_t* next = w.copied.get();
  for (size_t i = 0; i < views.size(); ++i) {
    dst[i] = next;
    next += CopiedBytes(*views[i], requant.count(views[i]) > 0);
  }
  auto place = [&](size_t i) {
    // The views belong to w, which we own.
    CopyView(const_cast<WeightView*>(views[i]), dst[i], requant.count(views[i]) > 0);
  };
  if (requant.empty()) {
    for (size_t i = 0; i < views.size(); ++i) place(i);
    return Status::Ok();
  }
  std::atomic<size_t> next_view{0};
  std::vector<std::thread> threads(std::max(1u, std::thread::hardware_concurrency()));
  for (std::thread& t : threads)
    t = std::thread([&] {
      for (size_t i = next_view++; i < views.size(); i = next_view++) place(i);
    });
  for (std::thread& t : threads) t.join();
  return Status::Ok();
}
}  // namespace

StatusOr<std::unique_ptr<ModelWeights>> ModelWeights::Load(const Checkpoint& ck,
                                                           const ModelConfig& c,
                                                           const LoadOptions& opt) {
  auto w = std::make_unique<ModelWeights>();
  Binder b(ck, w.get());
  RETURN_IF_ERROR(b.ValidateAll(ExpectedTensors(c), c, opt.mtp));
  if (opt.mtp == LoadOptions::Mtp::kSkip) w->mtp_bytes_not_loaded = b.MtpBytes(c);
  w->embed = b.Matrix("model.embed_tokens.weight");
  for (int l = 0; l < c.num_hidden_layers; ++l) w->layers.push_back(BindLayer(b, c, l, opt));
  w->final_norm = b.Vector("model.norm.weight");
  w->lm_head = b.Matrix("lm_head.weight");
  const int num_mtp = opt.mtp == LoadOptions::Mtp::kLoad ? c.num_nextn_predict_layers : 0;
  for (int i = 0; i < num_mtp; ++i) {
    const int l = c.num_hidden_layers + i;
    const std::string p = LayerPrefix(l);
    MtpWeights m;
    m.enorm = b.Vector(p + "enorm.weight");
    m.hnorm = b.Vector(p + "hnorm.weight");
    m.head_norm = b.Vector(p + "shared_head.norm.weight");
    m.eh_proj = b.Matrix(p + "eh_proj.weight");
    m.embed = b.Matrix(p + "embed_tokens.weight");
    m.head = b.Matrix(p + "shared_head.head.weight");
    m.layer = BindLayer(b, c, l, opt);
    w->mtp.push_back(std::move(m));
  }
  if (opt.memory == LoadOptions::Memory::kCopied || opt.requant != LoadOptions::Requant::kNone) {
    std::unordered_set<const WeightView*> requant;
    if (opt.requant == LoadOptions::Requant::kInt8) requant = RequantizedViews(*w);
    RETURN_IF_ERROR(CopyToHugePages(*w, requant));
  } else if (opt.prefault) {
    for (const WeightView* v : w->StreamedViews()) {
      PrefaultPages(v->data, v->DataBytes());
      PrefaultPages(v->scale, v->ScaleBytes());
    }
  }
  return w;
}

StatusOr<LoadedExpert> LoadExpert(const Checkpoint& ck, const ModelConfig& c, int layer, int expert,
                                  const LoadOptions& opt) {
  if (layer < 0 || layer >= c.num_hidden_layers + c.num_nextn_predict_layers ||
      !c.IsMoeLayer(layer) || expert < 0 || expert >= c.n_routed_experts)
    return Status::InvalidArgument("no routed expert " + std::to_string(expert) + " in layer " +
                                   std::to_string(layer));
  const std::string prefix = LayerPrefix(layer) + "mlp.experts." + std::to_string(expert) + ".";
  for (const char* m : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"})
    if (ck.Find(prefix + m) == nullptr)
      return Status::DataLoss(ck.listing_path() + ": missing tensor " + prefix + m);
  ModelWeights scratch;  // holds copies of tensors not aligned in the file
  Binder b(ck, &scratch);
  LoadedExpert out{.layer = layer, .expert = expert, .weights = BindMlp(b, prefix)};
  WeightView* views[3] = {&out.weights.gate, &out.weights.up, &out.weights.down};
  const bool requant = opt.requant == LoadOptions::Requant::kInt8;
  if (opt.memory == LoadOptions::Memory::kCopied || requant || !scratch.owned.empty()) {
    size_t total = 0;
    for (WeightView* v : views) total += CopiedBytes(*v, requant);
    out.memory = std::shared_ptr<uint8_t>(static_cast<uint8_t*>(std::aligned_alloc(64, total)),
                                          [](uint8_t* p) { std::free(p); });
    if (out.memory == nullptr)
      return Status::IoError("cannot allocate " + std::to_string(total) + " bytes for expert " +
                             std::to_string(expert) + " of layer " + std::to_string(layer));
    uint8_t* next = out.memory.get();
    for (WeightView* v : views) {
      const size_t bytes = CopiedBytes(*v, requant);
      CopyView(v, next, requant);
      next += bytes;
    }
    out.bytes = static_cast<int64_t>(total);
  } else {
    for (WeightView* v : views) {
      PrefaultPages(v->data, v->DataBytes());
      PrefaultPages(v->scale, v->ScaleBytes());
      out.bytes += static_cast<int64_t>(v->DataBytes() + v->ScaleBytes());
    }
  }
  return out;
}

void InstallExpert(ModelWeights& w, LoadedExpert e) {
  const int main = static_cast<int>(w.layers.size());
  LayerWeights& l = e.layer < main ? w.layers[e.layer] : w.mtp[e.layer - main].layer;
  l.moe->experts[e.expert] = e.weights;
  if (e.memory) w.late_experts[{e.layer, e.expert}] = std::move(e.memory);
}

int64_t ReleaseExpert(ModelWeights& w, int layer, int expert) {
  const int main = static_cast<int>(w.layers.size());
  LayerWeights& l = layer < main ? w.layers[layer] : w.mtp[layer - main].layer;
  MlpWeights& m = l.moe->experts[expert];
  int64_t bytes = 0;
  const long page = ::sysconf(_SC_PAGESIZE);
  auto release = [&](const void* p, size_t n) {
    bytes += static_cast<int64_t>(n);
    // Only the load-time private copy is this rank's to give back (a file mapping is shared).
    if (p == nullptr || n == 0 || !w.copied || w.late_experts.count({layer, expert})) return;
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  };
  for (const WeightView* v : {&m.gate, &m.up, &m.down}) {
    release(v->data, v->DataBytes());
    release(v->scale, v->ScaleBytes());
  }
  m = MlpWeights{};
  w.late_experts.erase({layer, expert});
  return bytes;
}

const char* RequantName(LoadOptions::Requant requant) {
  return requant == LoadOptions::Requant::kInt8 ? "int8" : "none";
}

StatusOr<LoadOptions::Requant> ParseRequant(const std::string& name) {
  for (auto r : {LoadOptions::Requant::kNone, LoadOptions::Requant::kInt8})
    if (name == RequantName(r)) return r;
  return Status::InvalidArgument("requant \"" + name + "\" (want none or int8)");
}

std::vector<const WeightView*> ModelWeights::StreamedViews() const {
  std::vector<const WeightView*> out;
  for (const LayerWeights& l : layers) AddLayerViews(l, out);
  if (!lm_head.empty()) out.push_back(&lm_head);
  for (const MtpWeights& m : mtp) {
    for (const WeightView* v : {&m.eh_proj, &m.head})
      if (!v->empty()) out.push_back(v);
    AddLayerViews(m.layer, out);
  }
  return out;
}

}  // namespace epserve
