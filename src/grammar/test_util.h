// Helpers of the grammar tests: small vocabularies and byte-string matching.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/vocab.h"

namespace epserve::grammar {

// Ids 0..255: the single bytes; then `extra` multi-byte tokens; then the specials: `num_special`
// ids named by their index; the last special is the stop id.
inline std::shared_ptr<const TokenVocab> SmallVocab(const std::vector<std::string>& extra,
                                                    int num_special = 1) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  for (const std::string& e : extra) bytes.push_back(e);
  std::vector<bool> special(bytes.size(), false);
  for (int i = 0; i < num_special; ++i) {
    bytes.push_back("<special" + std::to_string(i) + ">");
    special.push_back(true);
  }
  const int32_t stop = static_cast<int32_t>(bytes.size()) - 1;
  return TokenVocab::Create(std::move(bytes), std::move(special), {stop});
}

// Whether the grammar matches exactly `text`, fed one byte token at a time (ids = bytes).
inline bool MatchesBytes(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocab> v,
                         const std::string& text) {
  Matcher m(std::move(g), std::move(v));
  for (char c : text) {
    if (!m.AcceptToken(static_cast<uint8_t>(c))) return false;
  }
  return m.IsComplete();
}

}  // namespace epserve::grammar
