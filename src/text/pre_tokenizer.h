// Pre-tokenizers from tokenizer.json's "pre_tokenizer": Sequence, Split (every behavior, invert),
// ByteLevel (add_prefix_space, use_regex), Digits (individual_digits), Metaspace (replacement,
// prepend_scheme, split), Whitespace, WhitespaceSplit. Anything else is an error at load.
// Thread safety: immutable after parsing.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace epserve::text {

// A piece of normalized text on its way to the model. `at_start`: it begins at offset 0 of the
// input (Metaspace's prepend_scheme "first" looks at that).
struct Piece {
  std::string text;
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces *pieces by their splits, in order; empty pieces are dropped.
  virtual void Apply(std::vector<Piece>* pieces) const = 0;
};

// How a split keeps the delimiters it found (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// A segment of a piece: [begin, end) and whether it was a delimiter match.
struct Segment {
  size_t begin, end;
  bool is_match;
};

// Applies `behavior` to `segments` (which cover `piece` in order) and appends the resulting
// non-empty pieces to *out.
void SplitBySegments(const Piece& piece, std::vector<Segment> segments, SplitBehavior behavior,
                     std::vector<Piece>* out);

// `where` names the component in errors ("tokenizer.json: pre_tokenizer"). Null gives nullptr.
StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const nlohmann::json& j,
                                                          const std::string& where);

}  // namespace epserve::text
