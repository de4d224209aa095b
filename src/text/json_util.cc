#include "text/json_util.h"

namespace epserve::text {

std::string JoinPath(const std::string& where, const char* key) {
  // A file name is followed by ": key"; a component path by ".key".
  const bool file = where.size() >= 5 && where.compare(where.size() - 5, 5, ".json") == 0;
  return where + (file ? ": " : ".") + key;
}

Status TypeError(const std::string& where, const char* what, const nlohmann::json& got) {
  return Status::InvalidArgument(where + ": expected " + what + ", got " + got.type_name());
}

StatusOr<std::string> GetString(const nlohmann::json& obj, const char* key,
                                const std::string& where, std::string fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_string()) return TypeError(JoinPath(where, key), "a string", *it);
  return it->get<std::string>();
}

StatusOr<bool> GetBool(const nlohmann::json& obj, const char* key, const std::string& where,
                       bool fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return TypeError(JoinPath(where, key), "a boolean", *it);
  return it->get<bool>();
}

StatusOr<int64_t> GetInt(const nlohmann::json& obj, const char* key, const std::string& where,
                         int64_t fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) return TypeError(JoinPath(where, key), "an integer", *it);
  return it->get<int64_t>();
}

StatusOr<std::string> ComponentType(const nlohmann::json& obj, const std::string& where) {
  if (!obj.is_object()) return TypeError(where, "an object", obj);
  auto it = obj.find("type");
  if (it == obj.end() || !it->is_string())
    return Status::InvalidArgument(where + ": missing string field \"type\"");
  return it->get<std::string>();
}

Status Unsupported(const std::string& where, const std::string& type) {
  return Status::InvalidArgument(where + ": unsupported type \"" + type + "\"");
}

}  // namespace epserve::text
