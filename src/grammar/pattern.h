// JSON Schema "pattern" (a regex subset) as the grammar of a JSON string's content, with each
// character JSON-encoded. Supported: literal characters, escapes (\. \\ \/ \n \t \r \f \v
// \uXXXX and escaped metacharacters), \d \w \s \D \W \S, classes [...] / [^...] with ASCII
// ranges, '.', groups (...) and (?:...), '|', ?, *, +, {m}, {m,}, {m,n} (lazy forms too), and
// '^' / '$' only at the very start / end. A pattern without '^' may have anything before it, one
// without '$' anything after it (JSON Schema patterns are unanchored searches). Anything else
// is an error naming the pattern. \D \W \S and negated classes produce ASCII characters only
// (Python's \d and \w also match non-ASCII digits and letters).
#pragma once

#include <string>

#include "base/status.h"
#include "grammar/builder.h"

namespace epserve::grammar::json {

StatusOr<GrammarBuilder::Expr> PatternString(GrammarBuilder& b, const std::string& pattern);

}  // namespace epserve::grammar::json
