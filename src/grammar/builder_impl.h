// GrammarBuilder's internals, shared by builder.cc (lowering) and json_schema.cc / json_values.cc.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "grammar/builder.h"
#include "grammar/grammar_ir.h"

namespace epserve::grammar {

enum class ExprKind : uint8_t { kEmpty, kBytes, kToken, kSeq, kAlt, kRef, kRepeat };

struct ExprNode {
  ExprKind kind;
  ByteSet bytes;               // kBytes
  int32_t arg = 0;             // kToken: id; kRef: rule; kRepeat: the repeated expr
  int32_t min = 0, max = 0;    // kRepeat
  std::vector<int32_t> items;  // kSeq, kAlt
};

struct GrammarBuilder::Impl {
  std::vector<ExprNode> exprs;
  std::vector<std::string> rule_names;
  std::vector<int32_t> rule_bodies;  // -1 until SetRule
  // Memoized shared pieces (json_values.cc): key -> expr.
  std::map<std::string, int32_t> memo;
  bool built = false;
};

}  // namespace epserve::grammar
