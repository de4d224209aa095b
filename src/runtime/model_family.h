// Which model family's forward pass a checkpoint needs (docs/architecture.md, "The model-family
// seam"), from its config.json: model_type "deepseek_v4" is DeepSeek-V4 (model/v4/), anything
// else the DeepSeek-V2/V3/V3.2 family (model/model.h), whose own config parser then checks the
// rest.
#pragma once

#include <string>

#include "base/status.h"

namespace epserve {

enum class ModelFamily { kDeepSeekV3, kDeepSeekV4 };
const char* ModelFamilyName(ModelFamily family);  // "DeepSeek-V2/V3" | "DeepSeek-V4"

// Errors: config.json not JSON (naming the file). Without a config.json: kDeepSeekV3, whose
// loader then says what the folder lacks.
StatusOr<ModelFamily> DetectModelFamily(const std::string& dir);

}  // namespace epserve
