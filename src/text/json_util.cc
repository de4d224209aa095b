#include "text/json_util.h"

#include <fstream>
#include <sstream>

namespace epserve::text {

StatusOr<nlohmann::json> ParseJson(std::string_view text, const std::string& name) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based: the byte at which the parser stopped.
    const size_t byte = e.byte > 0 ? std::min<size_t>(e.byte - 1, text.size()) : 0;
    size_t line = 1, column = 1;
    for (size_t i = 0; i < byte; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string what = e.what();
    // nlohmann's message starts with "[json.exception.parse_error.101] parse error at line...";
    // keep the reason.
    const size_t colon = what.find(": ", what.find("parse error"));
    if (colon != std::string::npos) what = what.substr(colon + 2);
    for (char& c : what) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    return Status::InvalidArgument(name + ": invalid JSON at line " + std::to_string(line) +
                                   ", column " + std::to_string(column) + " (byte " +
                                   std::to_string(byte) + "): " + what);
  }
}

StatusOr<nlohmann::json> ReadJsonFile(const std::string& path, const std::string& name) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(name + ": cannot open " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return Status::IoError(name + ": read failed: " + path);
  return ParseJson(buffer.str(), name);
}

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
