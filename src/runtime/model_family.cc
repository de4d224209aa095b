#include "runtime/model_family.h"

#include <fstream>
#include <sstream>

#include "base/json.h"

namespace epserve {

const char* ModelFamilyName(ModelFamily family) {
  return family == ModelFamily::kDeepSeekV4 ? "DeepSeek-V4" : "DeepSeek-V2/V3";
}

StatusOr<ModelFamily> DetectModelFamily(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  // No config.json: the V2/V3 loader's errors say what the folder lacks.
  if (!in) return ModelFamily::kDeepSeekV3;
  std::stringstream text;
  text << in.rdbuf();
  ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text.str(), path));
  if (j.is_object() && j.contains("model_type") && j["model_type"] == "deepseek_v4")
    return ModelFamily::kDeepSeekV4;
  return ModelFamily::kDeepSeekV3;
}

}  // namespace epserve
