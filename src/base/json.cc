#include "base/json.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace epserve {
namespace {

// nlohmann's what() is "[json.exception.parse_error.101] parse error at line 1, column 5:
// syntax error while parsing value - ..."; the reason is what follows the position.
std::string ParseReason(const nlohmann::json::parse_error& e) {
  std::string what = e.what();
  const size_t at = what.find("parse error");
  const size_t colon = at == std::string::npos ? std::string::npos : what.find(": ", at);
  if (colon != std::string::npos) {
    what = what.substr(colon + 2);
  } else {
    what = JsonExceptionText(e);
  }
  std::replace(what.begin(), what.end(), '\n', ' ');
  std::replace(what.begin(), what.end(), '\r', ' ');
  if (what.size() > 200) what = what.substr(0, 197) + "...";
  return what;
}

Status ParseError(const nlohmann::json::parse_error& e, std::string_view text,
                  const std::string& name) {
  // e.byte is 1-based: the byte at which the parser stopped (one past the end for a truncated
  // text).
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
  const bool one_line =
      text.find('\n') == std::string_view::npos || text.find('\n') == text.size() - 1;
  const std::string where =
      one_line ? "column " + std::to_string(column)
               : "line " + std::to_string(line) + ", column " + std::to_string(column);
  return Status::DataLoss(name + ": invalid JSON at " + where + ": " + ParseReason(e));
}

template <class Json>
StatusOr<Json> Parse(std::string_view text, const std::string& name) {
  if (JsonNestingDepth(text, kMaxJsonDepth) > kMaxJsonDepth)
    return Status::DataLoss(name + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                            " levels");
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return ParseError(e, text, name);
  } catch (const nlohmann::json::exception& e) {
    return Status::DataLoss(name + ": invalid JSON: " + JsonExceptionText(e));
  }
}

}  // namespace

int JsonNestingDepth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped byte cannot end the string
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) {
        deepest = depth;
        if (deepest > limit) return limit + 1;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

std::string JsonExceptionText(const nlohmann::json::exception& e) {
  std::string what = e.what();
  if (what.rfind("[json.exception.", 0) == 0) {
    const size_t end = what.find("] ");
    if (end != std::string::npos) what = what.substr(end + 2);
  }
  return what;
}

StatusOr<nlohmann::json> ParseJson(std::string_view text, const std::string& name) {
  return Parse<nlohmann::json>(text, name);
}

StatusOr<nlohmann::ordered_json> ParseOrderedJson(std::string_view text, const std::string& name) {
  return Parse<nlohmann::ordered_json>(text, name);
}

StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open: " + std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return Status::IoError(path + ": read failed: " + std::strerror(errno));
  return ParseJson(buffer.str(), path);
}

StatusOr<const nlohmann::json*> JsonField(const nlohmann::json& obj, const char* key,
                                          const std::string& where) {
  if (!obj.is_object()) {
    return Status::DataLoss(where + ": expected an object, got " + std::string(obj.type_name()));
  }
  const auto it = obj.find(key);
  if (it == obj.end()) return Status::DataLoss(where + ": missing key \"" + key + "\"");
  return &*it;
}

}  // namespace epserve
