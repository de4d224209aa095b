#include "model/generation_config.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "base/json.h"
#include "io/checkpoint.h"

namespace epserve {

namespace {

Status Bad(const std::string& path, const char* field, const std::string& want,
           const nlohmann::json& got) {
  return Status::InvalidArgument(path + ": field \"" + field + "\" must be " + want + ", got " +
                                 got.dump());
}

}  // namespace

std::string GenerationConfig::Source() const {
  if (path.empty()) return "built-in: " + why_none;
  if (empty()) return "built-in: " + path + " sets no temperature, top_p or top_k";
  std::string fields;
  for (auto [name, set] :
       {std::pair{"temperature", temperature.has_value()}, std::pair{"top_p", top_p.has_value()},
        std::pair{"top_k", top_k.has_value()}})
    if (set) fields += std::string(fields.empty() ? "" : ", ") + name;
  return fields + " from " + path;
}

StatusOr<GenerationConfig> GenerationConfig::Parse(const std::string& text,
                                                   const std::string& path) {
  ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, path));
  if (!j.is_object())
    return Status::InvalidArgument(path + ": expected a JSON object, got " + j.type_name());
  GenerationConfig g;
  g.path = path;
  auto given = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  if (given("temperature")) {
    const nlohmann::json& v = j["temperature"];
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0 ||
        v.get<double>() > 2)
      return Bad(path, "temperature", "a number in [0, 2]", v);
    g.temperature = v.get<float>();
  }
  if (given("top_p")) {
    const nlohmann::json& v = j["top_p"];
    if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > 1)
      return Bad(path, "top_p", "a number in (0, 1]", v);
    g.top_p = v.get<float>();
  }
  if (given("top_k")) {
    const nlohmann::json& v = j["top_k"];
    if (!v.is_number_integer() || v.get<int64_t>() < -1 || v.get<int64_t>() > INT32_MAX)
      return Bad(path, "top_k", "an integer >= 0 (0 or -1: all tokens)", v);
    g.top_k = std::max<int>(0, static_cast<int>(v.get<int64_t>()));
  }
  return g;
}

StatusOr<GenerationConfig> ReadGenerationConfig(const std::string& choice,
                                                const std::string& model_dir) {
  GenerationConfig none;
  if (choice == "none") {
    none.why_none = "--generation-config none";
    return none;
  }
  std::string path = choice;
  if (choice == "auto") {
    path = model_dir + "/generation_config.json";
    if (!std::filesystem::exists(path)) {
      none.why_none = "no " + path;
      return none;
    }
  }
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return GenerationConfig::Parse(text, path);
}

}  // namespace epserve
