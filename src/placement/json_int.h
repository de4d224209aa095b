// Int fields of the placement and trace headers, read without nlohmann's get<int>(), which
// converts a float such as 1e50 (undefined behaviour) or an integer beyond int's range (wraps)
// instead of failing.
#pragma once

#include <climits>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace epserve::placement {

// `value` as an int; DataLoss naming `where` unless it is a JSON integer in int's range.
inline StatusOr<int> JsonInt(const nlohmann::json& value, const std::string& where) {
  const bool in_range = value.is_number_unsigned() ? value.get<uint64_t>() <= INT_MAX
                        : value.is_number_integer()
                            ? value.get<int64_t>() >= INT_MIN && value.get<int64_t>() <= INT_MAX
                            : false;
  if (!in_range) {
    std::string got = value.is_primitive() ? value.dump() : std::string(value.type_name());
    if (got.size() > 40) got = got.substr(0, 37) + "...";
    return Status::DataLoss(where + ": expected an integer in int's range, got " + got);
  }
  return static_cast<int>(value.get<int64_t>());
}

// Field `key` of `object` as an int; `fallback` when the field is absent.
inline StatusOr<int> JsonIntOr(const nlohmann::json& object, const char* key, int fallback,
                               const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) return fallback;
  return JsonInt(*it, where + key);
}

// A JSON array of ints.
inline StatusOr<std::vector<int>> JsonIntArray(const nlohmann::json& value,
                                               const std::string& where) {
  if (!value.is_array()) {
    return Status::DataLoss(where + ": expected an array of integers, got " +
                            std::string(value.type_name()));
  }
  std::vector<int> ints;
  ints.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    ASSIGN_OR_RETURN(int v, JsonInt(value[i], where + "[" + std::to_string(i) + "]"));
    ints.push_back(v);
  }
  return ints;
}

}  // namespace epserve::placement
