#include "runtime/loaded_model.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "model/synthetic.h"
#include "model/tensor_names.h"
#include "text/bpe_trainer.h"

namespace epserve {

StatusOr<std::unique_ptr<LoadedModel>> LoadModel(const std::string& dir,
                                                 const LoadOptions& options) {
  auto m = std::make_unique<LoadedModel>();
  ASSIGN_OR_RETURN(m->checkpoint, Checkpoint::Open(dir));
  ASSIGN_OR_RETURN(m->config,
                   ModelConfig::Parse(m->checkpoint->config_text(), m->checkpoint->config_path()));
  ASSIGN_OR_RETURN(m->weights, ModelWeights::Load(*m->checkpoint, m->config, options));
  return m;
}

std::string DescribeLoad(const LoadedModel& m, const std::string& dir) {
  auto bytes = [](int64_t n) {
    char buf[32];
    if (n >= 1000000000)
      std::snprintf(buf, sizeof(buf), "%.2f GB", n / 1e9);
    else
      std::snprintf(buf, sizeof(buf), "%.1f MB", n / 1e6);
    return std::string(buf);
  };
  const ModelConfig& c = m.config;
  int64_t total = 0, mtp = 0;
  for (const auto& [name, info] : m.checkpoint->tensors()) {
    total += static_cast<int64_t>(info->num_bytes);
    for (int i = 0; i < c.num_nextn_predict_layers; ++i)
      if (name.starts_with(LayerPrefix(c.num_hidden_layers + i)))
        mtp += static_cast<int64_t>(info->num_bytes);
  }
  std::string s = "weights: " + bytes(total) + " in " + dir;
  if (c.num_nextn_predict_layers == 0) return s;
  const std::string layers =
      c.num_nextn_predict_layers == 1
          ? LayerPrefix(c.num_hidden_layers) + "*"
          : "model.layers." + std::to_string(c.num_hidden_layers) + "-" +
                std::to_string(c.num_hidden_layers + c.num_nextn_predict_layers - 1) + ".*";
  if (!m.weights->mtp.empty()) return s + " (the MTP module's " + bytes(mtp) + " included)";
  if (mtp == 0)
    return s + "; the MTP module (" + layers +
           ") is not in the checkpoint, not needed with --mtp off";
  return s + "; not loaded: the MTP module (" + layers + ", " +
         bytes(m.weights->mtp_bytes_not_loaded) + "; --mtp off)";
}

namespace {
// The byte-level BPE `epserve make-model` writes: exactly the preset's vocab_size ids.
Status WritePresetTokenizer(const ModelConfig& config, const std::string& dir) {
  ASSIGN_OR_RETURN(auto files, text::TrainByteLevelBpe({.vocab_size = config.vocab_size}));
  return text::WriteTokenizerFiles(files, dir);
}
}  // namespace

StatusOr<std::string> EnsurePresetModel(const std::string& preset, bool fp8, int num_shards,
                                        const std::function<void(int, int)>& progress) {
  namespace fs = std::filesystem;
  std::string base;
  if (const char* d = std::getenv("EPSERVE_CACHE_DIR"); d && *d)
    base = d;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    base = std::string(x) + "/epserve";
  else if (const char* h = std::getenv("HOME"); h && *h)
    base = std::string(h) + "/.cache/epserve";
  else
    base = "/tmp/epserve-cache";
  const std::string dir = base + "/models/" + preset + (fp8 ? "-fp8" : "-bf16");
  if (fs::exists(dir + "/config.json")) {
    // Models cached before generated models carried a tokenizer get one now.
    if (!fs::exists(dir + "/tokenizer.json")) {
      ASSIGN_OR_RETURN(ModelConfig config, PresetConfig(preset));
      RETURN_IF_ERROR(WritePresetTokenizer(config, dir));
    }
    return dir;
  }
  std::fprintf(stderr, "epserve: generating the %s model (preset %s) in %s\n", fp8 ? "fp8" : "bf16",
               preset.c_str(), dir.c_str());
  // Write to a temporary folder and rename, so concurrent first uses never see half a model.
  const std::string tmp = dir + ".tmp." + std::to_string(::getpid());
  ASSIGN_OR_RETURN(ModelConfig config, PresetConfig(preset));
  RETURN_IF_ERROR(WriteSyntheticCheckpoint({.out_dir = tmp,
                                            .config = config,
                                            .dtype = fp8 ? WeightDType::kFP8 : WeightDType::kBF16,
                                            .seed = 0,
                                            .num_shards = num_shards,
                                            .progress = progress}));
  RETURN_IF_ERROR(WritePresetTokenizer(config, tmp));
  std::error_code ec;
  fs::rename(tmp, dir, ec);
  if (ec && !fs::exists(dir + "/config.json"))
    return Status::IoError(dir + ": cannot install model: " + ec.message());
  fs::remove_all(tmp, ec);
  return dir;
}

StatusOr<std::string> EnsureDefaultModel() { return EnsurePresetModel("tiny", false, 1, nullptr); }

}  // namespace epserve
