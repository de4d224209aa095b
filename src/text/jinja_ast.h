// The Jinja syntax tree: expressions and statements as the parser builds them. A parsed Template
// is immutable and may be rendered concurrently.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja_lexer.h"
#include "text/jinja_value.h"

namespace epserve::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // args (is_tuple for `(a, b)`)
    kDict,     // args: key0, value0, key1, value1, ...
    kGetAttr,  // args[0].name
    kGetItem,  // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]], absent parts are null
    kCall,     // args[0](args[1:], kwargs)
    kFilter,   // args[0] | name(args[1:], kwargs)
    kTest,     // args[0] is [not] name(args[1:], kwargs)
    kUnary,    // name in {"-", "+", "not"} applied to args[0]
    kBinary,   // args[0] name args[1]; name in {+ - * / // % ** ~ and or}
    kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ... (chained)
    kCond,     // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Kind kind;
  SourcePos pos;
  Value literal;
  std::string name;
  bool negated = false;  // `is not`
  bool is_tuple = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  enum class Kind {
    kText,      // text
    kPrint,     // {{ expr }}
    kIf,        // conds[i] -> bodies[i]; else_body
    kFor,       // for targets in expr [if cond] body [else else_body]
    kSet,       // set targets = expr, or set targets[0].attr = expr
    kSetBlock,  // set targets[0] [| filter] %}body{% endset; `filter` reads the block via
                // kBlockName
    kMacro,     // macro name(params) body
    kBreak,
    kContinue,
    kFilterBlock,  // filter %}body{% endfilter
    kGeneration,   // transformers' {% generation %}: renders its body unchanged
  };
  Kind kind;
  SourcePos pos;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  ExprPtr filter;  // a kFilter chain whose innermost value is Name(kBlockName)
  std::vector<std::string> targets;
  std::string attr;  // kSet on a namespace attribute
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::string name;
  std::vector<MacroParam> params;
};

// The variable holding a block's rendered text inside a kSetBlock / kFilterBlock filter chain.
inline constexpr char kBlockName[] = " block";

struct Template {
  std::string origin;
  Body body;
};

}  // namespace epserve::text::jinja
