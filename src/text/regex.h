// A compiled PCRE2 regular expression (PCRE2_UTF | PCRE2_UCP, JIT-compiled when the platform
// supports it) for the tokenizer's Split/Replace components. Subjects must be valid UTF-8
// (the tokenizer validates its input once; matching skips PCRE2's own check).
// Thread safety: a compiled Regex is immutable; FindAll may run on many threads at once
// (each call uses its own match data).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace epserve::text {

class Regex {
 public:
  // `pattern` is the regex source (Hugging Face's {"Regex": ...}); `where` names it in errors.
  static StatusOr<Regex> Compile(std::string_view pattern, const std::string& where);
  // A literal string (Hugging Face's {"String": ...}), matched as-is.
  static StatusOr<Regex> Literal(std::string_view literal, const std::string& where);

  // Appends the [begin, end) byte ranges of all non-overlapping matches, left to right.
  // Empty matches are reported too (callers drop them); the search then moves on one character.
  void FindAll(std::string_view subject, std::vector<std::pair<size_t, size_t>>* matches) const;

 private:
  struct Code;
  explicit Regex(std::shared_ptr<const Code> code) : code_(std::move(code)) {}
  std::shared_ptr<const Code> code_;
};

// Hugging Face's pattern object: {"String": literal} or {"Regex": source}.
StatusOr<Regex> ParsePattern(const nlohmann::json& j, const std::string& where);

}  // namespace epserve::text
