#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/output_file.h"
#include "io/safetensors_writer.h"
#include "model/synthetic.h"
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

// Uniform values with mean `mean` and standard deviation `std` (uniform keeps generation fast
// for the multi-GB bench preset; any zero-mean distribution keeps activations sane).
std::vector<float> RandomValues(const std::string& name, uint64_t seed, int64_t n, float mean, float std) {
  std::vector<float> v(n);
  uint64_t s = HashName(name, seed);
  const float half_width = std * std::sqrt(3.0f);
  for (int64_t i = 0; i < n; ++i) {
    float u = static_cast<float>(SplitMix(s) >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    v[i] = mean + (2.0f * u - 1.0f) * half_width;
  }
  return v;
}

std::vector<uint8_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t x = F32ToBf16(v[i]);
    std::memcpy(&b[2 * i], &x, 2);
  }
  return b;
}

std::vector<uint8_t> ToF32(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// 128x128 block quantization: scale = amax / 448 per tile, q = round(w / scale).
void QuantizeFp8(const std::vector<float>& w, int64_t rows, int64_t cols, std::vector<uint8_t>* q,
                 std::vector<float>* scale) {
  const int64_t sr = (rows + 127) / 128, sc = (cols + 127) / 128;
  q->resize(rows * cols);
  scale->assign(sr * sc, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float& s = (*scale)[(r / 128) * sc + c / 128];
      s = std::fmax(s, std::fabs(w[r * cols + c]));
    }
  for (float& s : *scale) s = s > 0 ? s / kFp8E4M3Max : 1.0f;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) (*q)[r * cols + c] = F32ToFp8E4M3(w[r * cols + c] / (*scale)[(r / 128) * sc + c / 128]);
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

void AddTensor(SafetensorsWriter& w, const TensorSpec& in_spec, const SyntheticOptions& opt) {
  const MtpRecipe recipe = MtpRecipeFor(in_spec, opt);
  const std::string& out_name = in_spec.name;
  if (recipe.kind == MtpRecipe::kIdentity || recipe.kind == MtpRecipe::kOnes) {
    const int64_t rows = in_spec.shape[0], cols = in_spec.shape.size() == 1 ? 1 : in_spec.shape[1];
    std::vector<float> v(rows * cols, recipe.kind == MtpRecipe::kOnes ? 1.0f : 0.0f);
    if (recipe.kind == MtpRecipe::kIdentity)
      for (int64_t r = 0; r < rows; ++r) v[r * cols + r] = 1.0f;  // [H, 2H] = [I | 0]
    w.Add(out_name, DType::kBF16, in_spec.shape, ToBf16(v));
    return;
  }
  // A copy draws from the source's name (the same random stream); the tensor keeps its own.
  TensorSpec spec = in_spec;
  if (recipe.kind == MtpRecipe::kCopy) spec.name = recipe.source;
  const int64_t n = spec.shape.size() == 1 ? spec.shape[0] : spec.shape[0] * spec.shape[1];
  switch (spec.role) {
    case TensorRole::kNorm:
      w.Add(out_name, DType::kBF16, spec.shape, ToBf16(RandomValues(spec.name, opt.seed, n, 1.0f, 0.1f)));
      return;
    case TensorRole::kBias:
      w.Add(out_name, DType::kF32, spec.shape, ToF32(RandomValues(spec.name, opt.seed, n, 0.0f, 0.02f)));
      return;
    case TensorRole::kEmbedding: {
      const bool is_input = spec.name.find("embed_tokens") != std::string::npos;
      const float std = is_input ? 1.0f : 1.0f / std::sqrt(static_cast<float>(spec.shape[1]));
      w.Add(out_name, DType::kBF16, spec.shape, ToBf16(RandomValues(spec.name, opt.seed, n, 0.0f, std)));
      return;
    }
    case TensorRole::kRouter:
    case TensorRole::kLinear: {
      // from-main: every layer writes into the residual stream at a tenth of the usual scale
      // (o_proj, down_proj), so the next token depends mostly on the current one and a
      // one-layer draft can agree with the whole model.
      const bool damped = opt.mtp_from_main && (spec.name.find("o_proj.") != std::string::npos ||
                                                spec.name.find("down_proj.") != std::string::npos);
      const float std = (damped ? 0.1f : 1.0f) / std::sqrt(static_cast<float>(spec.shape[1]));
      std::vector<float> v = RandomValues(spec.name, opt.seed, n, 0.0f, std);
      // As in DeepSeek-V3's FP8 release: projections are FP8, the router and eh_proj BF16.
      const bool fp8 = opt.dtype == WeightDType::kFP8 && spec.role == TensorRole::kLinear &&
                       spec.name.find("eh_proj") == std::string::npos;
      if (!fp8) {
        w.Add(out_name, DType::kBF16, spec.shape, ToBf16(v));
        return;
      }
      std::vector<uint8_t> q;
      std::vector<float> scale;
      QuantizeFp8(v, spec.shape[0], spec.shape[1], &q, &scale);
      w.Add(out_name, DType::kF8E4M3, spec.shape, std::move(q));
      w.Add(out_name + "_scale_inv", DType::kF32, {(spec.shape[0] + 127) / 128, (spec.shape[1] + 127) / 128},
            ToF32(scale));
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
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  size_t total_bytes = 0;
  for (int shard = 0; shard < opt.num_shards; ++shard) {
    SafetensorsWriter writer;
    writer.SetMetadata("format", "pt");
    for (const auto& spec : specs) {
      // Model-level tensors go to the first (embedding) and last (norm, head) shards; layers
      // are spread evenly.
      int s = spec.layer < 0 ? (spec.name.rfind("model.embed", 0) == 0 ? 0 : opt.num_shards - 1)
                             : static_cast<int>(static_cast<int64_t>(spec.layer) * opt.num_shards / total_layers);
      if (s == shard) AddTensor(writer, spec, opt);
    }
    const std::string file = opt.num_shards == 1
                                 ? std::string("model.safetensors")
                                 : "model-" + std::string(5 - std::to_string(shard + 1).size(), '0') + std::to_string(shard + 1) +
                                       "-of-" + std::string(5 - std::to_string(opt.num_shards).size(), '0') +
                                       std::to_string(opt.num_shards) + ".safetensors";
    for (const auto& name : writer.Names()) weight_map[name] = file;
    total_bytes += writer.total_bytes();
    RETURN_IF_ERROR(writer.Write(opt.out_dir + "/" + file));
    if (opt.progress) opt.progress(shard + 1, opt.num_shards);
  }
  if (opt.num_shards > 1) {
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", total_bytes}};
    index["weight_map"] = weight_map;
    RETURN_IF_ERROR(
        WriteFileAtomically(opt.out_dir + "/model.safetensors.index.json", index.dump(2) + "\n"));
  }
  return Status::Ok();
}

}  // namespace epserve
