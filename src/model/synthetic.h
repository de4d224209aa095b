// Deterministic random checkpoints in exactly the Hugging Face DeepSeek layout (same tensor
// names, shapes, dtypes, FP8 128x128 block scales, e_score_correction_bias), for tests and
// benchmarks: `epserve make-model`. Each tensor's values depend only on (seed, tensor name),
// so the output is byte-identical across runs and independent of writing order. The writer
// streams: each tensor's values are generated when its turn in the file comes, a chunk (at most
// 128 rows for FP8 tiles) at a time, so memory stays a few MB whatever the preset or shard size.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/config.h"

namespace epserve {

enum class WeightDType { kBF16, kFP8 };

struct SyntheticOptions {
  std::string out_dir;
  ModelConfig config;
  WeightDType dtype = WeightDType::kBF16;
  uint64_t seed = 0;
  // A model whose MTP module drafts well, to test and measure speculative decoding: the MTP
  // block is a copy of the last layer, its embedding, head and head norm are the model's,
  // enorm/hnorm are ones and eh_proj = [I | 0] passes the next token's normalized embedding
  // on; and every layer's o_proj and down_proj (experts included) are drawn at a tenth of the
  // usual scale, so the residual stream is mostly the current token's embedding and a
  // one-layer draft agrees with the whole model often. Else all random.
  bool mtp_from_main = false;
  int num_shards = 1;  // > 1 writes model-0000i-of-0000N.safetensors + index
  // Called after each tensor is written with (bytes of tensor data written so far, in all
  // shards; their total); may be null.
  std::function<void(uint64_t bytes_done, uint64_t bytes_total)> progress;
};

// Known presets: "tiny", "tiny-v2", "bench" (see docs/checkpoint-format.md).
StatusOr<ModelConfig> PresetConfig(const std::string& preset);
std::vector<std::string> PresetNames();

Status WriteSyntheticCheckpoint(const SyntheticOptions& options);

}  // namespace epserve
