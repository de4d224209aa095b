// The tensors a DeepSeek-V2/V3 checkpoint holds, by Hugging Face name, with their shapes and
// roles (docs/checkpoint-format.md). Used both to validate a checkpoint and to write one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace epserve {

enum class TensorRole {
  kNorm,       // RMSNorm weight [n]; BF16 or F32
  kBias,       // e_score_correction_bias [experts]; F32 or BF16
  kEmbedding,  // embed_tokens / lm_head [vocab, hidden]; BF16 or F32
  kRouter,     // mlp.gate.weight [experts, hidden]; BF16 or F32
  kLinear,     // a projection [out, in]; BF16, F32, or F8_E4M3 with <name>_scale_inv
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  TensorRole role;
  int layer = -1;   // -1 for model-level tensors
  int expert = -1;  // routed expert index, else -1
};

// Every tensor the config implies, MTP layers included (scale_inv tensors are implied by
// kLinear weights stored as FP8 and are not listed).
std::vector<TensorSpec> ExpectedTensors(const ModelConfig& config);

std::string LayerPrefix(int layer);  // "model.layers.<layer>."

}  // namespace epserve
