#include "planner/json_util.h"

#include <cmath>
#include <fstream>
#include <sstream>

namespace epserve::planner {

StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IoError("cannot open " + path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return Status::IoError("cannot read " + path);
  return buffer.str();
}

StatusOr<double> GetNumber(const nlohmann::json& obj, const std::string& key,
                           const std::string& context) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) {
    return Status::NotFound(context + ": missing field '" + key + "'");
  }
  const nlohmann::json& value = obj[key];
  if (!value.is_number()) {
    return Status::InvalidArgument(context + ": field '" + key + "' must be a number");
  }
  double number = value.get<double>();
  if (!std::isfinite(number)) {
    return Status::InvalidArgument(context + ": field '" + key + "' is not finite");
  }
  return number;
}

StatusOr<int> GetInt(const nlohmann::json& obj, const std::string& key,
                     const std::string& context) {
  ASSIGN_OR_RETURN(double number, GetNumber(obj, key, context));
  if (number != std::floor(number) || std::fabs(number) > 2e9) {
    return Status::InvalidArgument(context + ": field '" + key + "' must be an integer");
  }
  return static_cast<int>(number);
}

StatusOr<double> GetNumberOr(const nlohmann::json& obj, const std::string& key, double fallback,
                             const std::string& context) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return fallback;
  return GetNumber(obj, key, context);
}

StatusOr<int> GetIntOr(const nlohmann::json& obj, const std::string& key, int fallback,
                       const std::string& context) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return fallback;
  return GetInt(obj, key, context);
}

std::string GetStringOr(const nlohmann::json& obj, const std::string& key,
                        const std::string& fallback) {
  if (!obj.is_object() || !obj.contains(key) || !obj[key].is_string()) return fallback;
  return obj[key].get<std::string>();
}

}  // namespace epserve::planner
