// Deterministic random DeepSeek-V4 checkpoints in the Hugging Face layout of docs/v4-model.md §2
// (`epserve make-model --preset tiny-v4|v4-flash|v4-pro`), the model V4Weights::Load reads.
//
// WeightDType::kFP8 is the released format: projections F8_E4M3 with F8_E8M0 (UE8M0) scales
// per 128x128 tile, routed experts FP4 e2m1 packed two per byte in I8 (low nibble first) with an
// F8_E8M0 scale per 32 inputs of a row; norms, gate, compressors, weights_proj, embed and head
// BF16; hyper-connection tensors, sinks, ape and gate bias F32; tid2eid I64. kBF16 is its twin:
// every FP8/FP4 weight stored as the BF16 of its decoded value (exact: e4m3 · 2^e and
// e2m1 · 2^e are BF16 numbers), everything else the same bytes, so the two are one model.
//
// Each tensor's values depend only on (seed, tensor name): byte-identical across runs and
// independent of sharding. The writer streams: a tensor's values are generated when its turn
// in the file comes, a strip (128 rows of an FP8 weight, at most 64K values otherwise) at a
// time, so memory stays a few MB whatever the preset (v4-pro is ~0.8 TB in FP8).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/synthetic.h"
#include "model/v4/v4_config.h"
#include "tensor/dtype.h"

namespace epserve::v4 {

struct V4PresetOptions {
  std::string preset;  // tiny-v4 | v4-flash | v4-pro
  int num_layers = 0;  // the first N main layers (0: all); compress_ratios is cut to match
  // MTP modules written (0 or the preset's 1). The engine does not run V4's MTP yet.
  int num_mtp_layers = 0;
};

// tiny-v4 is tests/reference/v4_checkpoint.py's TINY_CONFIG (hidden 256, window 8,
// compress_ratios [0, 4, 16, 4], 1 hash layer, vocab 512, ...); v4-flash and v4-pro are the
// released configs (docs/v4-model.md §1). num_hash_layers is cut to num_layers.
StatusOr<V4Config> V4PresetConfig(const V4PresetOptions& options);
std::vector<std::string> V4PresetNames();
bool IsV4Preset(const std::string& preset);

// config.json as written for `dtype` (kFP8 adds quantization_config and expert_dtype "fp4");
// ParseV4Config reads it back to `config`.
std::string V4ConfigJson(const V4Config& config, WeightDType dtype);

// One stored tensor (a weight, or the ".scale" beside a quantized one).
struct V4StoredTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t NumBytes() const;
};

// Every tensor the checkpoint of `config` in `dtype` holds, in name order (MTP modules
// included when config.num_mtp_layers > 0): the dry run of WriteV4SyntheticCheckpoint.
std::vector<V4StoredTensor> V4CheckpointTensors(const V4Config& config, WeightDType dtype);
uint64_t V4CheckpointBytes(const V4Config& config, WeightDType dtype);  // tensor data only

struct V4SyntheticOptions {
  std::string out_dir;  // created if missing
  V4Config config;
  WeightDType dtype = WeightDType::kFP8;
  uint64_t seed = 0;
  int num_shards = 1;  // > 1: model-0000i-of-0000N.safetensors + model.safetensors.index.json
  // Called after each tensor with (data bytes written so far, their total); may be null.
  std::function<void(uint64_t bytes_done, uint64_t bytes_total)> progress;
};

// Writes config.json and the safetensors (not a tokenizer). The config is checked first by
// parsing the config.json it would write.
Status WriteV4SyntheticCheckpoint(const V4SyntheticOptions& options);

}  // namespace epserve::v4
