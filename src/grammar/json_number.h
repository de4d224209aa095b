// Bounded JSON numbers as digit grammars: integers in [lo, hi] (either bound optional), and
// numbers in [lo, hi] with integer bounds (no exponent, so the bounds stay checkable).
#pragma once

#include <cstdint>
#include <optional>

#include "base/status.h"
#include "grammar/builder.h"

namespace epserve::grammar::json {

// REQUIRES: lo <= hi when both are set (the caller reports that error).
GrammarBuilder::Expr IntegerRange(GrammarBuilder& b, std::optional<int64_t> lo,
                                  std::optional<int64_t> hi);
GrammarBuilder::Expr NumberRange(GrammarBuilder& b, std::optional<int64_t> lo,
                                 std::optional<int64_t> hi);

}  // namespace epserve::grammar::json
