#include "model/v4/v4_synthetic.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/output_file.h"
#include "io/safetensors_writer.h"

namespace epserve::v4 {

namespace {

// ---- Presets (docs/v4-model.md §1; tiny-v4 = tests/reference/v4_checkpoint.py TINY_CONFIG).

std::vector<int> Repeat(std::vector<int> head, const std::vector<int>& unit, int times,
                        const std::vector<int>& tail) {
  for (int i = 0; i < times; ++i) head.insert(head.end(), unit.begin(), unit.end());
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

V4Config Common() {
  V4Config c;
  c.num_mtp_layers = 1;
  c.head_dim = 512;
  c.rope_dim = 64;
  c.o_lora_rank = 1024;
  c.window = 128;
  c.compress_rope_theta = 160000;
  c.rope_theta = 10000;
  c.rope_factor = 16;
  c.rope_original_len = 65536;
  c.beta_fast = 32;
  c.beta_slow = 1;
  c.index_heads = 64;
  c.index_dim = 128;
  c.hc_mult = 4;
  c.hc_sinkhorn_iters = 20;
  c.hc_eps = 1e-6;
  c.rms_norm_eps = 1e-6;
  c.experts_per_token = 6;
  c.num_hash_layers = 3;
  c.swiglu_limit = 10.0;
  c.max_position_embeddings = 1048576;
  c.vocab_size = 129280;
  return c;
}

V4Config Flash() {
  V4Config c = Common();
  c.hidden_size = 4096;
  c.num_layers = 43;
  c.num_heads = 64;
  c.q_lora_rank = 1024;
  c.o_groups = 8;
  c.compress_ratios = Repeat({0, 0}, {4, 128}, 20, {4, 0});
  c.index_topk = 512;
  c.num_experts = 256;
  c.moe_inter = 2048;
  c.route_scale = 1.5;
  return c;
}

V4Config Pro() {
  V4Config c = Common();
  c.hidden_size = 7168;
  c.num_layers = 61;
  c.num_heads = 128;
  c.q_lora_rank = 1536;
  c.o_groups = 16;
  c.compress_ratios = Repeat({128, 128}, {4, 128}, 29, {4, 0});
  c.index_topk = 1024;
  c.num_experts = 384;
  c.moe_inter = 3072;
  c.route_scale = 2.5;
  return c;
}

// A window-only layer, an indexed ratio-4 layer, a 128-kind layer with ratio 16, another
// ratio-4 layer; a shrunken window and top-k so short prompts exercise every path.
V4Config TinyV4() {
  V4Config c = Common();
  c.vocab_size = 512;
  c.hidden_size = 256;
  c.num_layers = 4;
  c.num_heads = 4;
  c.head_dim = 128;
  c.q_lora_rank = 128;
  c.o_groups = 2;
  c.o_lora_rank = 128;
  c.window = 8;
  c.compress_ratios = {0, 4, 16, 4, 0};
  c.index_heads = 4;
  c.index_topk = 4;
  c.num_experts = 16;
  c.experts_per_token = 4;
  c.moe_inter = 128;
  c.num_hash_layers = 1;
  c.route_scale = 1.5;
  // Real models use 10; the tiny one's expert activations are O(1), so a smaller limit makes
  // the clamp act on some values (as v4_checkpoint.py).
  c.swiglu_limit = 1.5;
  c.max_position_embeddings = 4096;
  return c;
}

// ---- Values: uniform with a tensor's mean and standard deviation, from the stream of
// (seed, name) (as model/synthetic.cc: uniform keeps the multi-hundred-GB presets fast).

uint64_t SplitMix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t HashName(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// How a tensor is made and stored.
enum class Kind {
  kBf16,     // BF16 in both dtypes (norms, gate, compressors, weights_proj, embed, head)
  kF32,      // F32 (hyper-connections, sinks, ape, gate bias)
  kFp8,      // F8_E4M3 + 128x128 UE8M0 scales; BF16 of the decoded values in the twin
  kFp4,      // I8 packed e2m1 + UE8M0 per 32 inputs; BF16 of the decoded values in the twin
  kTid2eid,  // I64 [V, k]: k distinct experts per token
};

struct Spec {
  std::string name;
  Kind kind = Kind::kBf16;
  std::vector<int64_t> shape;  // logical: FP4 weights unpacked [rows, cols]
  float mean = 0.0f, std = 0.0f;
  // hc_*_base: + 2 on the M x M identity after the first 2M entries (streams mostly keep to
  // themselves, as v4_checkpoint.py); 0: none.
  int identity_m = 0;

  int64_t rows() const { return shape[0]; }
  int64_t cols() const { return shape.size() > 1 ? shape[1] : 1; }
  int64_t size() const { return rows() * cols(); }
};

class Values {
 public:
  Values(const Spec& spec, uint64_t seed)
      : spec_(spec), state_(HashName(spec.name, seed)), half_width_(spec.std * std::sqrt(3.0f)) {}

  void Next(float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const float u = static_cast<float>(SplitMix(state_) >> 40) * (1.0f / 16777216.0f);
      out[i] = spec_.mean + (2.0f * u - 1.0f) * half_width_;
      const int64_t m = spec_.identity_m, k = index_ + i - 2 * m;
      if (m > 0 && k >= 0 && k / m == k % m) out[i] += 2.0f;
    }
    index_ += n;
  }

 private:
  const Spec& spec_;
  uint64_t state_;
  const float half_width_;
  int64_t index_ = 0;
};

constexpr int64_t kChunkValues = int64_t{1} << 16;

// The logical tensors of a V4 checkpoint (docs/v4-model.md §2), magnitudes as
// v4_checkpoint.py: projections 1/sqrt(fan-in), norms around 1, HC mixes 1/sqrt(M D).
std::vector<Spec> LogicalTensors(const V4Config& c) {
  std::vector<Spec> t;
  const int64_t D = c.hidden_size, M = c.hc_mult;
  auto fan_in = [](int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };
  auto add = [&](const std::string& name, Kind kind, std::vector<int64_t> shape, float mean,
                 float std) {
    t.push_back({.name = name, .kind = kind, .shape = std::move(shape), .mean = mean, .std = std});
  };
  auto norm = [&](const std::string& name, int64_t n) { add(name, Kind::kBf16, {n}, 1.0f, 0.1f); };
  auto proj = [&](const std::string& name, int64_t rows, int64_t cols) {
    add(name + ".weight", Kind::kFp8, {rows, cols}, 0.0f, fan_in(cols));
  };
  auto hc = [&](const std::string& p, const std::string& kind, int64_t mix, int64_t scales) {
    add(p + "hc_" + kind + "_fn", Kind::kF32, {mix, M * D}, 0.0f, fan_in(M * D));
    add(p + "hc_" + kind + "_base", Kind::kF32, {mix}, 0.0f, 0.5f);
    if (mix == c.HcMixWidth()) t.back().identity_m = static_cast<int>(M);
    add(p + "hc_" + kind + "_scale", Kind::kF32, {scales}, 1.0f, 0.5f / std::sqrt(3.0f));
  };
  auto compressor = [&](const std::string& p, int ratio, int64_t d) {
    const int64_t cd = V4Config::CompressFactor(ratio) * d;
    add(p + ".wkv.weight", Kind::kBf16, {cd, D}, 0.0f, fan_in(D));
    add(p + ".wgate.weight", Kind::kBf16, {cd, D}, 0.0f, fan_in(D));
    add(p + ".ape", Kind::kF32, {ratio, cd}, 0.0f, 0.5f);
    norm(p + ".norm.weight", d);
  };
  auto layer = [&](const std::string& p, int ratio, bool hashed) {
    norm(p + "attn_norm.weight", D);
    norm(p + "ffn_norm.weight", D);
    hc(p, "attn", c.HcMixWidth(), 3);
    hc(p, "ffn", c.HcMixWidth(), 3);
    const std::string a = p + "attn.";
    proj(a + "wq_a", c.q_lora_rank, D);
    norm(a + "q_norm.weight", c.q_lora_rank);
    proj(a + "wq_b", c.QWidth(), c.q_lora_rank);
    proj(a + "wkv", c.head_dim, D);
    norm(a + "kv_norm.weight", c.head_dim);
    add(a + "attn_sink", Kind::kF32, {c.num_heads}, 0.0f, 1.0f);
    proj(a + "wo_a", c.o_groups * c.o_lora_rank, c.OGroupIn());
    proj(a + "wo_b", D, c.o_groups * c.o_lora_rank);
    if (ratio != 0) compressor(a + "compressor", ratio, c.head_dim);
    if (ratio == 4) {
      proj(a + "indexer.wq_b", int64_t{c.index_heads} * c.index_dim, c.q_lora_rank);
      add(a + "indexer.weights_proj.weight", Kind::kBf16, {c.index_heads, D}, 0.0f, fan_in(D));
      compressor(a + "indexer.compressor", 4, c.index_dim);
    }
    const std::string f = p + "ffn.";
    add(f + "gate.weight", Kind::kBf16, {c.num_experts, D}, 0.0f, fan_in(D));
    if (hashed)
      add(f + "gate.tid2eid", Kind::kTid2eid, {c.vocab_size, c.experts_per_token}, 0.0f, 0.0f);
    else
      add(f + "gate.bias", Kind::kF32, {c.num_experts}, 0.0f, 0.1f);
    for (int e = 0; e < c.num_experts; ++e) {
      const std::string x = f + "experts." + std::to_string(e) + ".";
      add(x + "w1.weight", Kind::kFp4, {c.moe_inter, D}, 0.0f, fan_in(D));
      add(x + "w2.weight", Kind::kFp4, {D, c.moe_inter}, 0.0f, fan_in(c.moe_inter));
      add(x + "w3.weight", Kind::kFp4, {c.moe_inter, D}, 0.0f, fan_in(D));
    }
    proj(f + "shared_experts.w1", c.moe_inter, D);
    proj(f + "shared_experts.w2", D, c.moe_inter);
    proj(f + "shared_experts.w3", c.moe_inter, D);
  };

  add("embed.weight", Kind::kBf16, {c.vocab_size, D}, 0.0f, 1.0f);
  for (int l = 0; l < c.num_layers; ++l)
    layer("layers." + std::to_string(l) + ".", c.Ratio(l), l < c.num_hash_layers);
  norm("norm.weight", D);
  add("head.weight", Kind::kBf16, {c.vocab_size, D}, 0.0f, fan_in(D));
  hc("", "head", M, 1);
  for (int j = 0; j < c.num_mtp_layers; ++j) {
    const std::string p = "mtp." + std::to_string(j) + ".";
    layer(p, c.Ratio(c.num_layers + j), false);
    proj(p + "e_proj", D, D);
    proj(p + "h_proj", D, D);
    norm(p + "enorm.weight", D);
    norm(p + "hnorm.weight", D);
    norm(p + "norm.weight", D);
    hc(p, "head", M, 1);
  }
  return t;
}

// "<m>.weight" -> "<m>.scale".
std::string ScaleName(const std::string& weight) {
  return weight.substr(0, weight.size() - 6) + "scale";
}

// What `spec` is stored as: one tensor, or a quantized weight and its scales.
std::vector<V4StoredTensor> Stored(const Spec& s, WeightDType dtype) {
  switch (s.kind) {
    case Kind::kBf16:
      return {{s.name, DType::kBF16, s.shape}};
    case Kind::kF32:
      return {{s.name, DType::kF32, s.shape}};
    case Kind::kTid2eid:
      return {{s.name, DType::kI64, s.shape}};
    case Kind::kFp8:
    case Kind::kFp4:
      break;
  }
  if (dtype == WeightDType::kBF16) return {{s.name, DType::kBF16, s.shape}};
  if (s.kind == Kind::kFp8) {
    const int64_t t = kFp8BlockSize;
    return {{s.name, DType::kF8E4M3, s.shape},
            {ScaleName(s.name), DType::kF8E8M0, {(s.rows() + t - 1) / t, (s.cols() + t - 1) / t}}};
  }
  return {{s.name, DType::kI8, {s.rows(), s.cols() / 2}},
          {ScaleName(s.name), DType::kF8E8M0, {s.rows(), s.cols() / kFp4BlockSize}}};
}

// ---- Quantization, as DeepSeek's: a UE8M0 scale 2^e per block, e = ceil(log2(amax / qmax)),
// so the scaled block fits the format (e4m3: 448, e2m1: 6); values rounded to nearest even.

int ScaleExponent(float amax, double qmax) {
  int e = 0;
  const double m = std::frexp(std::max(static_cast<double>(amax), 1e-30) / qmax, &e);
  return std::clamp(m == 0.5 ? e - 1 : e, -127, 127);
}

// e2m1 code of |v| <= 6: nearest of {0, 0.5, 1, 1.5, 2, 3, 4, 6}, ties to the even code.
uint8_t Fp4Code(float v) {
  const float a = std::fabs(v);
  const uint8_t code = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                       (a >= 3.5f) + (a > 5.0f);
  return code != 0 && v < 0 ? static_cast<uint8_t>(code | 8) : code;
}

// A run of whole rows of a quantized weight, in the stored order of both of its tensors.
struct Strip {
  int64_t row_begin = 0, num_rows = 0;
  const uint8_t* codes = nullptr;  // e4m3 bytes, or packed e2m1 pairs
  int64_t code_bytes = 0;
  const uint8_t* scales = nullptr;  // UE8M0 bytes of these rows' blocks
  int64_t scale_bytes = 0;
};

// Generates and quantizes `s` (kFp8 or kFp4) strip by strip: FP8 128 rows (one row of tiles),
// FP4 as many rows as fit kChunkValues.
template <typename Fn>
Status QuantizeStrips(const Spec& s, uint64_t seed, Fn&& fn) {
  const int64_t rows = s.rows(), cols = s.cols();
  const bool fp8 = s.kind == Kind::kFp8;
  const int64_t strip = fp8 ? kFp8BlockSize : std::max<int64_t>(1, kChunkValues / cols);
  const int64_t tiles = (cols + kFp8BlockSize - 1) / kFp8BlockSize;
  Values values(s, seed);
  std::vector<float> w(std::min(rows, strip) * cols);
  std::vector<uint8_t> codes(fp8 ? w.size() : w.size() / 2);
  std::vector<uint8_t> scales(fp8 ? tiles : w.size() / kFp4BlockSize);
  for (int64_t r0 = 0; r0 < rows; r0 += strip) {
    const int64_t nr = std::min(strip, rows - r0);
    values.Next(w.data(), nr * cols);
    Strip out{.row_begin = r0, .num_rows = nr, .codes = codes.data(), .scales = scales.data()};
    if (fp8) {
      std::vector<float> amax(tiles, 0.0f), inv(tiles);
      for (int64_t r = 0; r < nr; ++r)
        for (int64_t c = 0; c < cols; ++c)
          amax[c / kFp8BlockSize] = std::max(amax[c / kFp8BlockSize], std::fabs(w[r * cols + c]));
      for (int64_t t = 0; t < tiles; ++t) {
        const int e = ScaleExponent(amax[t], kFp8E4M3Max);
        scales[t] = static_cast<uint8_t>(e + 127);
        inv[t] = std::ldexp(1.0f, -e);
      }
      for (int64_t r = 0; r < nr; ++r)
        for (int64_t c = 0; c < cols; ++c)
          codes[r * cols + c] = F32ToFp8E4M3(w[r * cols + c] * inv[c / kFp8BlockSize]);
      out.code_bytes = nr * cols;
      out.scale_bytes = tiles;
    } else {
      for (int64_t b = 0; b < nr * cols / kFp4BlockSize; ++b) {
        const float* x = w.data() + b * kFp4BlockSize;
        float amax = 0.0f;
        for (int j = 0; j < kFp4BlockSize; ++j) amax = std::max(amax, std::fabs(x[j]));
        const int e = ScaleExponent(amax, 6.0);
        scales[b] = static_cast<uint8_t>(e + 127);
        const float inv = std::ldexp(1.0f, -e);
        uint8_t* q = codes.data() + b * (kFp4BlockSize / 2);
        for (int j = 0; j < kFp4BlockSize; j += 2)  // input 2j in the low nibble
          q[j / 2] = static_cast<uint8_t>(Fp4Code(x[j] * inv) | (Fp4Code(x[j + 1] * inv) << 4));
      }
      out.code_bytes = nr * cols / 2;
      out.scale_bytes = nr * cols / kFp4BlockSize;
    }
    RETURN_IF_ERROR(fn(out));
  }
  return Status::Ok();
}

// The BF16 twin of one strip: every decoded value (exact in BF16).
void DecodeStrip(const Spec& s, const Strip& strip, std::vector<uint16_t>* out) {
  const int64_t cols = s.cols(), n = strip.num_rows * cols;
  out->resize(n);
  for (int64_t i = 0; i < n; ++i) {
    float v;
    if (s.kind == Kind::kFp8) {
      v = Fp8E4M3ToF32(strip.codes[i]) * Ue8m0ToF32(strip.scales[(i % cols) / kFp8BlockSize]);
    } else {
      const uint8_t byte = strip.codes[i / 2];
      v = kFp4E2M1ToF32[i % 2 == 0 ? byte & 0xf : byte >> 4] *
          Ue8m0ToF32(strip.scales[i / kFp4BlockSize]);
    }
    (*out)[i] = F32ToBf16(v);
  }
}

Status WriteFloats(const Spec& s, uint64_t seed, DType dtype, TensorSink& sink) {
  Values values(s, seed);
  const int64_t n = s.size();
  std::vector<float> v(std::min(n, kChunkValues));
  std::vector<uint16_t> b(dtype == DType::kBF16 ? v.size() : 0);
  for (int64_t i = 0; i < n; i += kChunkValues) {
    const int64_t m = std::min(kChunkValues, n - i);
    values.Next(v.data(), m);
    if (dtype == DType::kF32) {
      RETURN_IF_ERROR(sink.Append(v.data(), m * sizeof(float)));
      continue;
    }
    for (int64_t j = 0; j < m; ++j) b[j] = F32ToBf16(v[j]);
    RETURN_IF_ERROR(sink.Append(b.data(), m * sizeof(uint16_t)));
  }
  return Status::Ok();
}

// Each row: the first k of a random permutation of the experts (k distinct ids).
Status WriteTid2eid(const Spec& s, uint64_t seed, int num_experts, TensorSink& sink) {
  uint64_t state = HashName(s.name, seed);
  const int64_t k = s.cols();
  std::vector<int64_t> perm(num_experts), row(k);
  for (int64_t r = 0; r < s.rows(); ++r) {
    for (int e = 0; e < num_experts; ++e) perm[e] = e;
    for (int64_t i = 0; i < k; ++i) {
      const int64_t j = i + static_cast<int64_t>(SplitMix(state) % (num_experts - i));
      std::swap(perm[i], perm[j]);
      row[i] = perm[i];
    }
    RETURN_IF_ERROR(sink.Append(row.data(), k * sizeof(int64_t)));
  }
  return Status::Ok();
}

// Declares `s`'s stored tensors with producers: no value exists until the writer reaches it.
// A quantized weight and its scales each generate the values again (the scale sorts first).
void AddTensor(SafetensorsWriter& w, const Spec& s, const V4SyntheticOptions& opt) {
  const std::vector<V4StoredTensor> stored = Stored(s, opt.dtype);
  const uint64_t seed = opt.seed;
  const V4StoredTensor& main = stored[0];
  switch (s.kind) {
    case Kind::kBf16:
    case Kind::kF32:
      w.Add(main.name, main.dtype, main.shape, [s, seed, dtype = main.dtype](TensorSink& sink) {
        return WriteFloats(s, seed, dtype, sink);
      });
      return;
    case Kind::kTid2eid:
      w.Add(main.name, main.dtype, main.shape,
            [s, seed, e = opt.config.num_experts](TensorSink& sink) {
              return WriteTid2eid(s, seed, e, sink);
            });
      return;
    case Kind::kFp8:
    case Kind::kFp4:
      break;
  }
  if (opt.dtype == WeightDType::kBF16) {
    w.Add(main.name, DType::kBF16, main.shape, [s, seed](TensorSink& sink) {
      std::vector<uint16_t> bf16;
      return QuantizeStrips(s, seed, [&](const Strip& strip) {
        DecodeStrip(s, strip, &bf16);
        return sink.Append(bf16.data(), bf16.size() * sizeof(uint16_t));
      });
    });
    return;
  }
  w.Add(main.name, main.dtype, main.shape, [s, seed](TensorSink& sink) {
    return QuantizeStrips(
        s, seed, [&](const Strip& strip) { return sink.Append(strip.codes, strip.code_bytes); });
  });
  w.Add(stored[1].name, stored[1].dtype, stored[1].shape, [s, seed](TensorSink& sink) {
    return QuantizeStrips(
        s, seed, [&](const Strip& strip) { return sink.Append(strip.scales, strip.scale_bytes); });
  });
}

// Main layer l's tensors go to shard l * S / (L + MTP), MTP module j's as layer L + j; the
// embedding to the first shard, the head, final norm and hc_head to the last.
int ShardOf(const std::string& name, const V4Config& c, int num_shards) {
  const int total = c.num_layers + c.num_mtp_layers;
  int layer = -1;
  if (name.starts_with("layers.")) layer = std::stoi(name.substr(7));
  if (name.starts_with("mtp.")) layer = c.num_layers + std::stoi(name.substr(4));
  if (layer < 0) return name.starts_with("embed.") ? 0 : num_shards - 1;
  return static_cast<int>(int64_t{layer} * num_shards / total);
}

}  // namespace

std::vector<std::string> V4PresetNames() { return {"tiny-v4", "v4-flash", "v4-pro"}; }

bool IsV4Preset(const std::string& preset) {
  const std::vector<std::string> names = V4PresetNames();
  return std::find(names.begin(), names.end(), preset) != names.end();
}

StatusOr<V4Config> V4PresetConfig(const V4PresetOptions& options) {
  V4Config c;
  if (options.preset == "tiny-v4")
    c = TinyV4();
  else if (options.preset == "v4-flash")
    c = Flash();
  else if (options.preset == "v4-pro")
    c = Pro();
  else
    return Status::InvalidArgument("unknown V4 preset \"" + options.preset +
                                   "\" (want tiny-v4, v4-flash or v4-pro)");
  const int layers = options.num_layers == 0 ? c.num_layers : options.num_layers;
  if (layers < 1 || layers > c.num_layers)
    return Status::InvalidArgument("--layers " + std::to_string(options.num_layers) +
                                   ": the model has layers 1.." + std::to_string(c.num_layers));
  if (options.num_mtp_layers < 0 || options.num_mtp_layers > c.num_mtp_layers)
    return Status::InvalidArgument("--mtp-layers " + std::to_string(options.num_mtp_layers) +
                                   ": preset " + options.preset + " has " +
                                   std::to_string(c.num_mtp_layers) + " MTP module(s)");
  // compress_ratios: the kept layers' entries, then the kept MTP modules' (entry L + j).
  std::vector<int> ratios(c.compress_ratios.begin(), c.compress_ratios.begin() + layers);
  for (int j = 0; j < options.num_mtp_layers; ++j)
    ratios.push_back(c.compress_ratios[c.num_layers + j]);
  c.compress_ratios = ratios;
  c.num_layers = layers;
  c.num_mtp_layers = options.num_mtp_layers;
  c.num_hash_layers = std::min(c.num_hash_layers, layers);
  return c;
}

std::string V4ConfigJson(const V4Config& c, WeightDType dtype) {
  nlohmann::ordered_json j;
  j["architectures"] = {"DeepseekV4ForCausalLM"};
  j["model_type"] = "deepseek_v4";
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = 0;
  j["eos_token_id"] = 1;
  if (dtype == WeightDType::kFP8) j["expert_dtype"] = "fp4";
  j["compress_ratios"] = c.compress_ratios;
  j["compress_rope_theta"] = c.compress_rope_theta;
  j["hc_eps"] = c.hc_eps;
  j["hc_mult"] = c.hc_mult;
  j["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden_size;
  j["index_head_dim"] = c.index_dim;
  j["index_n_heads"] = c.index_heads;
  j["index_topk"] = c.index_topk;
  j["initializer_range"] = 0.02;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["moe_intermediate_size"] = c.moe_inter;
  j["n_routed_experts"] = c.num_experts;
  j["n_shared_experts"] = 1;
  j["norm_topk_prob"] = true;
  j["num_attention_heads"] = c.num_heads;
  j["num_experts_per_tok"] = c.experts_per_token;
  j["num_hash_layers"] = c.num_hash_layers;
  j["num_hidden_layers"] = c.num_layers;
  j["num_key_value_heads"] = 1;
  j["num_nextn_predict_layers"] = c.num_mtp_layers;
  j["o_groups"] = c.o_groups;
  j["o_lora_rank"] = c.o_lora_rank;
  j["q_lora_rank"] = c.q_lora_rank;
  j["qk_rope_head_dim"] = c.rope_dim;
  if (dtype == WeightDType::kFP8)
    j["quantization_config"] = {{"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"},
                                {"quant_method", "fp8"},
                                {"scale_fmt", "ue8m0"},
                                {"weight_block_size", {kFp8BlockSize, kFp8BlockSize}}};
  j["rms_norm_eps"] = c.rms_norm_eps;
  if (c.rope_original_len > 0)
    j["rope_scaling"] = {{"beta_fast", c.beta_fast},
                         {"beta_slow", c.beta_slow},
                         {"factor", c.rope_factor},
                         {"original_max_position_embeddings", c.rope_original_len},
                         {"type", "yarn"}};
  else
    j["rope_scaling"] = nullptr;
  j["rope_theta"] = c.rope_theta;
  j["routed_scaling_factor"] = c.route_scale;
  j["scoring_func"] = "sqrtsoftplus";
  j["sliding_window"] = c.window;
  j["swiglu_limit"] = c.swiglu_limit;
  j["tie_word_embeddings"] = false;
  j["topk_method"] = "noaux_tc";
  j["torch_dtype"] = "bfloat16";
  j["use_cache"] = true;
  j["vocab_size"] = c.vocab_size;
  return j.dump(2) + "\n";
}

uint64_t V4StoredTensor::NumBytes() const {
  uint64_t n = DTypeSize(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::vector<V4StoredTensor> V4CheckpointTensors(const V4Config& config, WeightDType dtype) {
  std::vector<V4StoredTensor> out;
  for (const Spec& s : LogicalTensors(config))
    for (V4StoredTensor& t : Stored(s, dtype)) out.push_back(std::move(t));
  std::sort(out.begin(), out.end(),
            [](const V4StoredTensor& a, const V4StoredTensor& b) { return a.name < b.name; });
  return out;
}

uint64_t V4CheckpointBytes(const V4Config& config, WeightDType dtype) {
  uint64_t bytes = 0;
  for (const Spec& s : LogicalTensors(config))
    for (const V4StoredTensor& t : Stored(s, dtype)) bytes += t.NumBytes();
  return bytes;
}

Status WriteV4SyntheticCheckpoint(const V4SyntheticOptions& opt) {
  namespace fs = std::filesystem;
  const std::string json = V4ConfigJson(opt.config, opt.dtype);
  RETURN_IF_ERROR(ParseV4Config(json, "preset config").status());
  if (opt.num_shards < 1) return Status::InvalidArgument("--shards must be >= 1");
  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);
  if (ec) return Status::IoError(opt.out_dir + ": cannot create directory: " + ec.message());
  RETURN_IF_ERROR(WriteFileAtomically(opt.out_dir + "/config.json", json));
  // Every shard's tensors are declared up front (shapes only), so the total is known before
  // the first byte is written.
  std::vector<SafetensorsWriter> writers(opt.num_shards);
  for (SafetensorsWriter& w : writers) w.SetMetadata("format", "pt");
  for (const Spec& s : LogicalTensors(opt.config))
    AddTensor(writers[ShardOf(s.name, opt.config, opt.num_shards)], s, opt);
  return WriteShardedCheckpoint(writers, opt.out_dir, opt.progress);
}

}  // namespace epserve::v4
