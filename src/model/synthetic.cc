#include "model/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/output_file.h"
#include "io/safetensors_writer.h"
#include "model/tensor_names.h"

namespace epserve {

namespace {

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

// How a tensor's values are drawn: uniform random with mean `mean` and standard deviation
// `std` from the stream of (seed, name) (uniform keeps generation fast for the multi-GB
// presets; any zero-mean distribution keeps activations sane), all ones, or [I | 0].
struct ValueRecipe {
  enum Kind { kRandom, kOnes, kIdentity } kind = kRandom;
  std::string name;  // names the random stream (an MTP copy draws from its source's)
  uint64_t seed = 0;
  float mean = 0.0f;
  float std = 0.0f;
  int64_t cols = 1;  // kIdentity: row length
};

// A tensor's values in order (row-major), a chunk at a time: value i is the same however the
// tensor is cut into chunks.
class ValueStream {
 public:
  explicit ValueStream(const ValueRecipe& recipe)
      : recipe_(recipe),
        state_(HashName(recipe.name, recipe.seed)),
        half_width_(recipe.std * std::sqrt(3.0f)) {}

  void Next(float* out, int64_t n) {
    switch (recipe_.kind) {
      case ValueRecipe::kRandom:
        for (int64_t i = 0; i < n; ++i) {
          float u = static_cast<float>(SplitMix(state_) >> 40) * (1.0f / 16777216.0f);  // [0, 1)
          out[i] = recipe_.mean + (2.0f * u - 1.0f) * half_width_;
        }
        break;
      case ValueRecipe::kOnes:
        std::fill(out, out + n, 1.0f);
        break;
      case ValueRecipe::kIdentity:
        for (int64_t i = 0; i < n; ++i) {
          const int64_t k = index_ + i;
          out[i] = k / recipe_.cols == k % recipe_.cols ? 1.0f : 0.0f;
        }
        break;
    }
    index_ += n;
  }

 private:
  const ValueRecipe recipe_;
  uint64_t state_;
  const float half_width_;
  int64_t index_ = 0;
};

// Values per chunk of a BF16 or F32 tensor: the writer's memory is a few of these, whatever
// the tensor's size.
constexpr int64_t kChunkValues = int64_t{1} << 16;

Status WriteBf16(const ValueRecipe& recipe, int64_t n, TensorSink& sink) {
  ValueStream values(recipe);
  std::vector<float> v(std::min(n, kChunkValues));
  std::vector<uint16_t> b(v.size());
  for (int64_t i = 0; i < n; i += kChunkValues) {
    const int64_t m = std::min(kChunkValues, n - i);
    values.Next(v.data(), m);
    for (int64_t j = 0; j < m; ++j) b[j] = F32ToBf16(v[j]);
    RETURN_IF_ERROR(sink.Append(b.data(), m * sizeof(uint16_t)));
  }
  return Status::Ok();
}

Status WriteF32(const ValueRecipe& recipe, int64_t n, TensorSink& sink) {
  ValueStream values(recipe);
  std::vector<float> v(std::min(n, kChunkValues));
  for (int64_t i = 0; i < n; i += kChunkValues) {
    const int64_t m = std::min(kChunkValues, n - i);
    values.Next(v.data(), m);
    RETURN_IF_ERROR(sink.Append(v.data(), m * sizeof(float)));
  }
  return Status::Ok();
}

// 128x128 block quantization: scale = amax / 448 per tile, q = round(w / scale), one strip of
// 128 rows at a time. `q` (null: scales only) receives the FP8 bytes; `scales` gets all
// ceil(rows/128) x ceil(cols/128) of them.
Status QuantizeFp8(const ValueRecipe& recipe, int64_t rows, int64_t cols, TensorSink* q,
                   std::vector<float>* scales) {
  constexpr int64_t kTile = kFp8BlockSize;
  const int64_t sc = (cols + kTile - 1) / kTile;
  scales->assign(((rows + kTile - 1) / kTile) * sc, 0.0f);
  ValueStream values(recipe);
  std::vector<float> w(std::min(rows, kTile) * cols);
  std::vector<uint8_t> qb(q != nullptr ? w.size() : 0);
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    const int64_t nr = std::min(kTile, rows - r0);
    values.Next(w.data(), nr * cols);
    float* s = scales->data() + (r0 / kTile) * sc;
    for (int64_t r = 0; r < nr; ++r)
      for (int64_t c = 0; c < cols; ++c)
        s[c / kTile] = std::fmax(s[c / kTile], std::fabs(w[r * cols + c]));
    for (int64_t c = 0; c < sc; ++c) s[c] = s[c] > 0 ? s[c] / kFp8E4M3Max : 1.0f;
    if (q == nullptr) continue;
    for (int64_t r = 0; r < nr; ++r)
      for (int64_t c = 0; c < cols; ++c)
        qb[r * cols + c] = F32ToFp8E4M3(w[r * cols + c] / s[c / kTile]);
    RETURN_IF_ERROR(q->Append(qb.data(), nr * cols));
  }
  return Status::Ok();
}

// How SyntheticOptions::mtp_from_main makes an MTP tensor: random as usual, with the values of
// a main-model tensor (`source`), [I | 0] (eh_proj) or ones (enorm, hnorm).
struct MtpRecipe {
  enum Kind { kOwn, kCopy, kIdentity, kOnes } kind = kOwn;
  std::string source;
};
MtpRecipe MtpRecipeFor(const TensorSpec& spec, const SyntheticOptions& opt) {
  const int L = opt.config.num_hidden_layers;
  if (!opt.mtp_from_main || spec.layer < L) return {};
  const std::string prefix = "model.layers." + std::to_string(spec.layer) + ".";
  const std::string rest = spec.name.substr(prefix.size());
  if (rest == "eh_proj.weight") return {MtpRecipe::kIdentity};
  if (rest == "enorm.weight" || rest == "hnorm.weight") return {MtpRecipe::kOnes};
  if (rest == "embed_tokens.weight") return {MtpRecipe::kCopy, "model.embed_tokens.weight"};
  if (rest == "shared_head.head.weight") return {MtpRecipe::kCopy, "lm_head.weight"};
  if (rest == "shared_head.norm.weight") return {MtpRecipe::kCopy, "model.norm.weight"};
  return {MtpRecipe::kCopy, "model.layers." + std::to_string(L - 1) + "." + rest};
}

void AddBf16(SafetensorsWriter& w, const std::string& name, const std::vector<int64_t>& shape,
             int64_t n, ValueRecipe recipe) {
  w.Add(name, DType::kBF16, shape,
        [recipe = std::move(recipe), n](TensorSink& sink) { return WriteBf16(recipe, n, sink); });
}

// An FP8 weight and its `_scale_inv`. The weight's producer (run first: its name sorts first)
// leaves the scales for the scale tensor's; were the order ever different, that one quantizes
// again on its own.
void AddFp8(SafetensorsWriter& w, const std::string& name, const std::vector<int64_t>& shape,
            ValueRecipe recipe) {
  struct Scales {
    std::vector<float> values;
    bool ready = false;
  };
  auto scales = std::make_shared<Scales>();
  const int64_t rows = shape[0], cols = shape[1];
  w.Add(name, DType::kF8E4M3, shape, [=](TensorSink& sink) {
    RETURN_IF_ERROR(QuantizeFp8(recipe, rows, cols, &sink, &scales->values));
    scales->ready = true;
    return Status::Ok();
  });
  const int64_t tile = kFp8BlockSize;
  w.Add(name + "_scale_inv", DType::kF32, {(rows + tile - 1) / tile, (cols + tile - 1) / tile},
        [=](TensorSink& sink) {
          if (!scales->ready)
            RETURN_IF_ERROR(QuantizeFp8(recipe, rows, cols, nullptr, &scales->values));
          Status st = sink.Append(scales->values.data(), scales->values.size() * sizeof(float));
          *scales = Scales{};  // freed; a later Write quantizes again
          return st;
        });
}

// Declares the tensor `in_spec` (and its scales) with producers: no values exist until the
// writer writes it.
void AddTensor(SafetensorsWriter& w, const TensorSpec& in_spec, const SyntheticOptions& opt) {
  const MtpRecipe mtp = MtpRecipeFor(in_spec, opt);
  const std::string& out_name = in_spec.name;
  const int64_t n =
      in_spec.shape.size() == 1 ? in_spec.shape[0] : in_spec.shape[0] * in_spec.shape[1];
  if (mtp.kind == MtpRecipe::kIdentity || mtp.kind == MtpRecipe::kOnes) {
    ValueRecipe recipe;
    recipe.kind = mtp.kind == MtpRecipe::kOnes ? ValueRecipe::kOnes : ValueRecipe::kIdentity;
    recipe.cols = in_spec.shape.size() == 1 ? 1 : in_spec.shape[1];  // [H, 2H] = [I | 0]
    AddBf16(w, out_name, in_spec.shape, n, recipe);
    return;
  }
  // A copy draws from the source's name (the same random stream); the tensor keeps its own.
  TensorSpec spec = in_spec;
  if (mtp.kind == MtpRecipe::kCopy) spec.name = mtp.source;
  ValueRecipe recipe{.kind = ValueRecipe::kRandom, .name = spec.name, .seed = opt.seed};
  switch (spec.role) {
    case TensorRole::kNorm:
      recipe.mean = 1.0f;
      recipe.std = 0.1f;
      AddBf16(w, out_name, spec.shape, n, recipe);
      return;
    case TensorRole::kBias:
      recipe.std = 0.02f;
      w.Add(out_name, DType::kF32, spec.shape,
            [recipe, n](TensorSink& sink) { return WriteF32(recipe, n, sink); });
      return;
    case TensorRole::kEmbedding: {
      const bool is_input = spec.name.find("embed_tokens") != std::string::npos;
      recipe.std = is_input ? 1.0f : 1.0f / std::sqrt(static_cast<float>(spec.shape[1]));
      AddBf16(w, out_name, spec.shape, n, recipe);
      return;
    }
    case TensorRole::kRouter:
    case TensorRole::kLinear: {
      // from-main: every layer writes into the residual stream at a tenth of the usual scale
      // (o_proj, down_proj), so the next token depends mostly on the current one and a
      // one-layer draft can agree with the whole model.
      const bool damped = opt.mtp_from_main && (spec.name.find("o_proj.") != std::string::npos ||
                                                spec.name.find("down_proj.") != std::string::npos);
      recipe.std = (damped ? 0.1f : 1.0f) / std::sqrt(static_cast<float>(spec.shape[1]));
      // As in DeepSeek-V3's FP8 release: projections are FP8, the router and eh_proj BF16.
      const bool fp8 = opt.dtype == WeightDType::kFP8 && spec.role == TensorRole::kLinear &&
                       spec.name.find("eh_proj") == std::string::npos;
      if (fp8)
        AddFp8(w, out_name, spec.shape, recipe);
      else
        AddBf16(w, out_name, spec.shape, n, recipe);
      return;
    }
  }
}

}  // namespace

Status WriteSyntheticCheckpoint(const SyntheticOptions& opt) {
  namespace fs = std::filesystem;
  RETURN_IF_ERROR(opt.config.Validate("preset config"));
  if (opt.num_shards < 1) return Status::InvalidArgument("--shards must be >= 1");
  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);
  if (ec) return Status::IoError(opt.out_dir + ": cannot create directory: " + ec.message());
  ModelConfig config = opt.config;
  config.fp8 = opt.dtype == WeightDType::kFP8;
  RETURN_IF_ERROR(WriteFileAtomically(opt.out_dir + "/config.json", config.ToJson()));
  const std::vector<TensorSpec> specs = ExpectedTensors(config);
  const int total_layers = config.num_hidden_layers + config.num_nextn_predict_layers;
  // Every shard's tensors are declared up front (shapes only, no values), so the total size is
  // known before the first byte is written.
  std::vector<SafetensorsWriter> writers(opt.num_shards);
  for (SafetensorsWriter& w : writers) w.SetMetadata("format", "pt");
  for (const auto& spec : specs) {
    // Model-level tensors go to the first (embedding) and last (norm, head) shards; layers
    // are spread evenly.
    int s =
        spec.layer < 0
            ? (spec.name.rfind("model.embed", 0) == 0 ? 0 : opt.num_shards - 1)
            : static_cast<int>(static_cast<int64_t>(spec.layer) * opt.num_shards / total_layers);
    AddTensor(writers[s], spec, opt);
  }
  return WriteShardedCheckpoint(writers, opt.out_dir, opt.progress);
}

}  // namespace epserve
