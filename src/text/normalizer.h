// Normalizers from tokenizer.json's "normalizer": Sequence, NFC, NFD, NFKC, NFKD (utf8proc),
// Lowercase, Replace, Prepend, Strip. Anything else is an error at load.
// Thread safety: immutable after parsing.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace epserve::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // REQUIRES: *text is valid UTF-8; it stays valid.
  virtual void Apply(std::string* text) const = 0;
};

// `where` names the component in errors ("tokenizer.json: normalizer").
// A null JSON value gives a null pointer (no normalization).
StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const nlohmann::json& j,
                                                      const std::string& where);

}  // namespace epserve::text
