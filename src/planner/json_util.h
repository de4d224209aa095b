// Small helpers for reading typed fields out of nlohmann::json with Status errors.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "base/json.h"
#include "base/status.h"

namespace epserve::planner {

// Reads a whole file into a string (IoError names the path).
StatusOr<std::string> ReadTextFile(const std::string& path);
// JSON files are read with ReadJsonFile (base/json.h): "path: invalid JSON at line L, column C:
// <reason>".

// Number field `key` of `obj`; NotFound / InvalidArgument name `context`.`key`.
StatusOr<double> GetNumber(const nlohmann::json& obj, const std::string& key,
                           const std::string& context);
// Like GetNumber but requires an integer value.
StatusOr<int> GetInt(const nlohmann::json& obj, const std::string& key, const std::string& context);
// Returns `fallback` when `key` is absent or null.
StatusOr<double> GetNumberOr(const nlohmann::json& obj, const std::string& key, double fallback,
                             const std::string& context);
StatusOr<int> GetIntOr(const nlohmann::json& obj, const std::string& key, int fallback,
                       const std::string& context);
std::string GetStringOr(const nlohmann::json& obj, const std::string& key,
                        const std::string& fallback);

}  // namespace epserve::planner
