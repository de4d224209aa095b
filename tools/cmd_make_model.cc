// `epserve make-model`: writes a deterministic random checkpoint in the Hugging Face layout.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "model/synthetic.h"
#include "model/tensor_names.h"
#include "model/v4/v4_synthetic.h"
#include "text/bpe_trainer.h"
#include "text/tokenizer.h"
#include "tools/command.h"
#include "tools/flag_checks.h"

namespace epserve::tools {

namespace {

constexpr double kLargeCheckpointBytes = 8e9;
constexpr double kProgressFromBytes = 1e9;  // a terminal sees progress for larger checkpoints
struct MakeModelFlags {
  std::string preset = "tiny";
  std::string out;
  std::string dtype = "bf16";
  uint64_t seed = 0;
  int shards = 0;                      // 0: preset default (bench: 4, others: 1)
  std::string tokenizer;               // a tokenizer folder to copy instead of training one
  bool force = false;                  // replace the checkpoint in a non-empty --out
  bool allow_large = false;            // write a checkpoint over kLargeCheckpointBytes
  std::string mtp_weights = "random";  // random | from-main (SyntheticOptions::mtp_from_main)
  int mtp_layers = -1;                 // -1: the preset's num_nextn_predict_layers (V4: 0)
  int layers = 0;                      // 0: the preset's num_hidden_layers
};

// The files of a checkpoint make-model writes (or a Hugging Face download has beside them).
bool IsCheckpointFile(const std::string& name) {
  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  auto ends = [&](const char* s) {
    const size_t n = std::char_traits<char>::length(s);
    return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
  };
  return (starts("model") && ends(".safetensors")) || name == "model.safetensors.index.json" ||
         name == "config.json" || (starts("tokenizer") && ends(".json")) ||
         name == "generation_config.json";
}

// A missing or empty --out is used as is. A non-empty one is refused unless --force, which
// removes the old checkpoint's files (a stale shard index would otherwise outlive a new
// single-file model) and keeps everything else.
Status PrepareOutDir(const std::string& dir, bool force) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return Status::Ok();
  if (!fs::is_directory(dir, ec))
    return Status::InvalidArgument("--out " + dir + " is not a folder");
  if (fs::is_empty(dir, ec)) return Status::Ok();
  if (!force)
    return Status::InvalidArgument("--out " + dir +
                                   " is not empty; pass --force to replace the checkpoint in it");
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (!IsCheckpointFile(e.path().filename().string()) || e.is_directory(ec)) continue;
    if (!fs::remove(e.path(), ec) || ec)
      return Status::IoError(e.path().string() + ": cannot remove: " + ec.message());
  }
  if (ec) return Status::IoError(dir + ": cannot list: " + ec.message());
  return Status::Ok();
}

// Refuses at once a checkpoint of about `bytes` that the disk under `out` has no room for,
// rather than after minutes of writing. Where the free space cannot be read, writing decides.
Status CheckDiskRoom(const std::string& out, double bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = fs::absolute(out, ec);
  while (!ec && !dir.empty() && !fs::exists(dir, ec) && dir != dir.parent_path())
    dir = dir.parent_path();
  if (ec) return Status::Ok();
  const fs::space_info space = fs::space(dir, ec);
  if (ec || static_cast<double>(space.available) >= bytes) return Status::Ok();
  char text[160];
  std::snprintf(text, sizeof(text), ": the checkpoint needs %.1f GB, the disk has %.1f GB free",
                bytes / 1e9, space.available / 1e9);
  return Status::IoError("--out " + out + text);
}

// Copies `from`'s tokenizer files, or trains a byte-level BPE with exactly vocab_size ids
// (without a chat template when `chat_template` is false: DeepSeek-V4 ships none, its prompt
// is the built-in encoding of serve/dsv4_prompt.h).
Status WriteTokenizer(const std::string& from, int vocab_size, const std::string& out_dir,
                      bool chat_template = true) {
  if (from.empty()) {
    ASSIGN_OR_RETURN(auto files, text::TrainByteLevelBpe({.vocab_size = vocab_size}));
    if (!chat_template) files.tokenizer_config.erase("chat_template");
    return text::WriteTokenizerFiles(files, out_dir);
  }
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    const std::filesystem::path src = std::filesystem::path(from) / name;
    if (!std::filesystem::exists(src)) continue;
    std::error_code ec;
    std::filesystem::copy_file(src, std::filesystem::path(out_dir) / name,
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return Status::IoError(src.string() + ": copy failed: " + ec.message());
  }
  return Status::Ok();
}

// "wrote 1.20 of 5.68 GB (21%)" on stderr, rewritten in place.
std::function<void(uint64_t, uint64_t)> ProgressLine() {
  return [percent = -1](uint64_t done, uint64_t total) mutable {
    const int now = total == 0 ? 100 : static_cast<int>(done * 100 / total);
    if (now == percent) return;
    percent = now;
    std::fprintf(stderr, "\rwrote %.2f of %.2f GB (%d%%)", done / 1e9, total / 1e9, now);
    if (done == total) std::fprintf(stderr, "\n");
  };
}

std::string LargeCheckpointError(const MakeModelFlags& f, double bytes, const std::string& hint) {
  return "preset " + f.preset + " in " + f.dtype + " is a " +
         std::to_string(static_cast<int64_t>(bytes / 1e9)) + " GB checkpoint; " + hint +
         "--allow-large writes it anyway";
}

// A DeepSeek-V4 preset (model/v4/v4_synthetic.h): the same flags through the V4 writer, whose
// fp8 is the released format (FP8 projections, FP4 routed experts) and bf16 its exact twin.
void MakeV4Model(const MakeModelFlags& f, CommandContext& ctx) {
  if (f.mtp_weights != "random")
    return ReportError(ctx, "--mtp-weights " + f.mtp_weights + ": not for DeepSeek-V4 presets");
  auto config = v4::V4PresetConfig(
      {.preset = f.preset, .num_layers = f.layers, .num_mtp_layers = std::max(f.mtp_layers, 0)});
  if (!config.ok()) return ReportError(ctx, config.status().message());
  if (!f.tokenizer.empty()) {
    auto loaded = text::Tokenizer::Load(f.tokenizer);
    if (!loaded.ok()) return ReportError(ctx, loaded.status().message());
    config->vocab_size = (*loaded)->vocab_size();
  }
  const WeightDType dtype = f.dtype == "fp8" ? WeightDType::kFP8 : WeightDType::kBF16;
  const double bytes = static_cast<double>(v4::V4CheckpointBytes(*config, dtype));
  if (bytes > kLargeCheckpointBytes && !f.allow_large)
    return ReportError(ctx, LargeCheckpointError(f, bytes, ""));
  Status st = PrepareOutDir(f.out, f.force);
  if (st.ok()) st = CheckDiskRoom(f.out, bytes);
  if (!st.ok()) return ReportError(ctx, st.message());
  v4::V4SyntheticOptions opt{.out_dir = f.out,
                             .config = *config,
                             .dtype = dtype,
                             .seed = f.seed,
                             .num_shards = f.shards > 0 ? f.shards : 1};
  if (::isatty(2) && (opt.num_shards > 1 || bytes > kProgressFromBytes))
    opt.progress = ProgressLine();
  st = v4::WriteV4SyntheticCheckpoint(opt);
  if (st.ok())
    st = WriteTokenizer(f.tokenizer, static_cast<int>(config->vocab_size), f.out,
                        /*chat_template=*/false);
  if (!st.ok()) return ReportError(ctx, st.message());
  std::printf("wrote %s model (%s) to %s\n", f.preset.c_str(), f.dtype.c_str(), f.out.c_str());
}

}  // namespace

void RegisterMakeModelCommand(CLI::App& app, CommandContext& ctx) {
  auto flags = std::make_shared<MakeModelFlags>();
  CLI::App* cmd = app.add_subcommand("make-model",
                                     "Write a deterministic random DeepSeek checkpoint "
                                     "(config.json + safetensors, exactly the\n"
                                     "Hugging Face layout) from a preset: tiny (V3 routing, a few "
                                     "MB, for tests), tiny-v2 (V2-Lite recipe),\n"
                                     "bench (V3 shapes scaled down, >= 2 GB, for benchmarks),\n"
                                     "tiny-v32 (tiny with DeepSeek-V3.2's sparse-attention "
                                     "indexer), the released configs\n"
                                     "v2-lite, v3 and v32 (DeepSeek-V3.2), and DeepSeek-V4: "
                                     "tiny-v4 (8 MB FP8, for tests), v4-flash and v4-pro\n"
                                     "(the released configs); --layers keeps the first N "
                                     "layers.");
  cmd->add_option("--preset", flags->preset,
                  "tiny | tiny-v2 | tiny-v32 | bench | v2-lite | v3 | v32 | tiny-v4 | v4-flash | "
                  "v4-pro")
      ->capture_default_str();
  cmd->add_option("--layers", flags->layers,
                  "the preset's first N decoder layers (0: all; v3 --layers 4 is its 3 dense "
                  "layers and its first MoE layer, at the real shapes)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--out", flags->out, "output directory (created; must be empty unless --force)")
      ->required();
  cmd->add_flag("--force", flags->force,
                "--out may hold a checkpoint: its model*.safetensors, index, config.json, "
                "tokenizer*.json and generation_config.json are removed first; other files stay");
  cmd->add_option("--dtype", flags->dtype,
                  "bf16 | fp8 (128x128 block-quantized projections; V4: also FP4 routed experts, "
                  "and bf16 the same model with every weight decoded to BF16)")
      ->capture_default_str();
  cmd->add_option("--seed", flags->seed, "random seed")->capture_default_str();
  cmd->add_option("--shards", flags->shards, "number of safetensors shards (0: preset default)")
      ->check(IntRange(0, 1024));
  cmd->add_option("--mtp-layers", flags->mtp_layers,
                  "MTP modules (num_nextn_predict_layers) instead of the preset's (tiny: 1, "
                  "tiny-v2 and bench: 0; V4 presets: 0, as the engine does not run V4's MTP)")
      ->check(IntRange(0, 1));
  cmd->add_option("--mtp-weights", flags->mtp_weights,
                  "the MTP module's weights: random, or from-main "
                  "(its block a copy of the last layer, the model's embedding and head, eh_proj "
                  "passing the next token's embedding on; every layer's o_proj and down_proj are "
                  "then drawn at a tenth of the usual scale, so the next token depends mostly on "
                  "the current one: a draft that agrees often)")
      ->check(CLI::IsMember({"random", "from-main"}))
      ->capture_default_str();
  cmd->add_flag("--allow-large", flags->allow_large,
                "write a checkpoint over 8 GB (the real-shape presets v2-lite, v3, v32, "
                "v4-flash and v4-pro)");
  cmd->add_option("--tokenizer", flags->tokenizer,
                  "copy this folder's tokenizer.json + tokenizer_config.json (vocab_size becomes "
                  "the tokenizer's)\n"
                  "instead of training a byte-level BPE that fills the preset's vocab_size");
  cmd->callback([flags, &ctx] {
    if (flags->dtype != "bf16" && flags->dtype != "fp8")
      return ReportError(ctx, "--dtype must be bf16 or fp8, got " + flags->dtype);
    if (v4::IsV4Preset(flags->preset)) return MakeV4Model(*flags, ctx);
    auto config = PresetConfig(flags->preset);
    if (!config.ok()) {
      std::vector<std::string> all = PresetNames();
      for (const std::string& n : v4::V4PresetNames()) all.push_back(n);
      std::string names;
      for (size_t i = 0; i < all.size(); ++i)
        names += std::string(i == 0 ? "" : i + 1 == all.size() ? " or " : ", ") + all[i];
      return ReportError(ctx, "unknown preset \"" + flags->preset + "\" (want " + names + ")");
    }
    if (flags->layers > 0) {
      config = WithLayers(*config, flags->layers);
      if (!config.ok()) return ReportError(ctx, config.status().message());
    }
    std::unique_ptr<text::Tokenizer> tokenizer;
    if (!flags->tokenizer.empty()) {
      auto loaded = text::Tokenizer::Load(flags->tokenizer);
      if (!loaded.ok()) return ReportError(ctx, loaded.status().message());
      tokenizer = std::move(*loaded);
      config->vocab_size = tokenizer->vocab_size();
    }
    if (flags->mtp_layers >= 0) config->num_nextn_predict_layers = flags->mtp_layers;
    if (flags->mtp_weights == "from-main" && config->num_nextn_predict_layers < 1)
      return ReportError(ctx, "--mtp-weights from-main: preset " + flags->preset +
                                  " has no MTP module (num_nextn_predict_layers is 0; add "
                                  "--mtp-layers 1)");
    // The writer streams (memory stays a few MB), but a real-shape preset (v2-lite: 31 GB in
    // BF16, v3: 684 GB in FP8) takes minutes to hours and the disk's room: asked for by name.
    double bytes = 0;
    const double elem = flags->dtype == "fp8" ? 1.0 : 2.0;
    for (const TensorSpec& t : ExpectedTensors(*config)) {
      double n = 1;
      for (int64_t d : t.shape) n *= static_cast<double>(d);
      bytes += n * elem;
    }
    if (bytes > kLargeCheckpointBytes && !flags->allow_large)
      return ReportError(ctx, LargeCheckpointError(
                                  *flags, bytes,
                                  config->sparse.enabled()
                                      ? std::string()
                                      : "`epserve bench decode --device cuda --preset " +
                                            flags->preset + "` makes it in GPU memory instead. "));
    Status prepared = PrepareOutDir(flags->out, flags->force);
    if (!prepared.ok()) return ReportError(ctx, prepared.message());
    // After --force removed the old checkpoint, whose room the new one may take.
    Status room = CheckDiskRoom(flags->out, bytes);
    if (!room.ok()) return ReportError(ctx, room.message());
    int shards = flags->shards > 0 ? flags->shards : (flags->preset == "bench" ? 4 : 1);
    const bool tty = ::isatty(2);
    SyntheticOptions opt{.out_dir = flags->out,
                         .config = *config,
                         .dtype = flags->dtype == "fp8" ? WeightDType::kFP8 : WeightDType::kBF16,
                         .seed = flags->seed,
                         .mtp_from_main = flags->mtp_weights == "from-main",
                         .num_shards = shards};
    if (tty && (shards > 1 || bytes > kProgressFromBytes)) opt.progress = ProgressLine();
    Status st = WriteSyntheticCheckpoint(opt);
    if (!st.ok()) return ReportError(ctx, st.message());
    st = WriteTokenizer(flags->tokenizer, config->vocab_size, flags->out);
    if (!st.ok()) return ReportError(ctx, st.message());
    std::printf("wrote %s model (%s) to %s\n", flags->preset.c_str(), flags->dtype.c_str(),
                flags->out.c_str());
  });
}

}  // namespace epserve::tools
