// The parser's class, shared by jinja_parser.cc (statements) and jinja_expr_parser.cc
// (expressions). Internal to the engine: include jinja_parser.h instead.
#pragma once

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "text/jinja_ast.h"

namespace epserve::text::jinja::internal {

inline ExprPtr MakeExpr(Expr::Kind kind, SourcePos pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

inline std::string Describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kText:
      return "template text";
    case TokenKind::kVarBegin:
      return "'{{'";
    case TokenKind::kVarEnd:
      return "'}}'";
    case TokenKind::kBlockBegin:
      return "'{%'";
    case TokenKind::kBlockEnd:
      return "'%}'";
    case TokenKind::kEnd:
      return "end of template";
    case TokenKind::kString:
      return "string literal";
    default:
      return "'" + t.text + "'";
  }
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& origin)
      : toks_(std::move(tokens)), origin_(origin) {}

  StatusOr<Body> ParseTop();

 private:
  const Token& Cur() const { return toks_[idx_]; }
  const Token& Peek(size_t k = 1) const { return toks_[std::min(idx_ + k, toks_.size() - 1)]; }
  bool IsOp(std::string_view op) const { return Cur().kind == TokenKind::kOp && Cur().text == op; }
  bool IsName(std::string_view name) const {
    return Cur().kind == TokenKind::kName && Cur().text == name;
  }
  void Advance() {
    if (idx_ + 1 < toks_.size()) ++idx_;
  }
  Status Error(const std::string& msg) const { return ErrorAt(origin_, Cur().pos, msg); }
  Status Expect(TokenKind kind, std::string_view text, const std::string& what) {
    if (Cur().kind != kind || (!text.empty() && Cur().text != text)) {
      return Error("expected " + what + ", got " + Describe(Cur()));
    }
    Advance();
    return Status::Ok();
  }
  Status ExpectBlockEnd() { return Expect(TokenKind::kBlockEnd, "", "'%}'"); }
  StatusOr<std::string> ExpectName() {
    if (Cur().kind != TokenKind::kName) return Error("expected a name, got " + Describe(Cur()));
    std::string name = Cur().text;
    Advance();
    return name;
  }

  // Parses statements until a block tag named in `ends`; consumes `{% end_tag`.
  StatusOr<Body> ParseBody(std::set<std::string> ends, std::string* end_tag,
                           const std::string& opener, SourcePos open_pos);

  // Recursive entry points are bounded so adversarial nesting (brackets, `not not ...`, blocks)
  // is an error rather than a stack overflow. Errors end the parse, so only success paths Leave.
  static constexpr int kMaxNesting = 200;
  Status Enter() {
    return ++nesting_ > kMaxNesting ? Error("template nested too deeply") : Status::Ok();
  }
  template <typename T>
  StatusOr<T> Leave(StatusOr<T> r) {
    --nesting_;
    return r;
  }

  StatusOr<StmtPtr> ParseStatement() {
    RETURN_IF_ERROR(Enter());
    return Leave(ParseStatementImpl());
  }
  StatusOr<StmtPtr> ParseStatementImpl();

  // `| f(args) | g` applied to the block's text (Name(kBlockName)).
  StatusOr<ExprPtr> ParseFilterChainOnBlock(bool leading_pipe = true);

  // An expression, or a tuple `a, b` (print and set values).
  StatusOr<ExprPtr> ParseTupleExpr();
  StatusOr<ExprPtr> ParseExpression() {
    RETURN_IF_ERROR(Enter());
    return Leave(ParseConditional());
  }
  StatusOr<ExprPtr> ParseConditional();

  using SubParser = StatusOr<ExprPtr> (Parser::*)();
  StatusOr<ExprPtr> ParseBinary(SubParser sub, std::initializer_list<std::string_view> ops,
                                bool word_ops);
  StatusOr<ExprPtr> ParseOr() { return ParseBinary(&Parser::ParseAnd, {"or"}, true); }
  StatusOr<ExprPtr> ParseAnd() { return ParseBinary(&Parser::ParseNot, {"and"}, true); }
  StatusOr<ExprPtr> ParseNot() {
    RETURN_IF_ERROR(Enter());
    return Leave(ParseNotImpl());
  }
  StatusOr<ExprPtr> ParseNotImpl();
  StatusOr<ExprPtr> ParseCompare();
  StatusOr<ExprPtr> ParseMath1() { return ParseBinary(&Parser::ParseConcat, {"+", "-"}, false); }
  StatusOr<ExprPtr> ParseConcat() { return ParseBinary(&Parser::ParseMath2, {"~"}, false); }
  StatusOr<ExprPtr> ParseMath2() {
    return ParseBinary(&Parser::ParsePow, {"*", "/", "//", "%"}, false);
  }
  StatusOr<ExprPtr> ParsePow() {
    return ParseBinary(&Parser::ParseUnaryWithFilters, {"**"}, false);
  }
  StatusOr<ExprPtr> ParseUnaryWithFilters() { return ParseUnary(true); }
  StatusOr<ExprPtr> ParseUnary(bool with_filters) {
    RETURN_IF_ERROR(Enter());
    return Leave(ParseUnaryImpl(with_filters));
  }
  StatusOr<ExprPtr> ParseUnaryImpl(bool with_filters);
  StatusOr<ExprPtr> ParseFilter(ExprPtr value);
  StatusOr<ExprPtr> ParseTest(ExprPtr value);
  StatusOr<ExprPtr> ParseCall(ExprPtr callee, Expr::Kind kind);

  // `( a, b, key=c )` appended to node->args / node->kwargs.
  Status ParseArgs(Expr* node);
  StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  StatusOr<ExprPtr> ParsePrimary();
  StatusOr<ExprPtr> ParseParenthesized();
  StatusOr<ExprPtr> ParseListOrDict(bool is_dict);

  std::vector<Token> toks_;
  const std::string& origin_;
  size_t idx_ = 0;
  int loop_depth_ = 0;
  int nesting_ = 0;
};

}  // namespace epserve::text::jinja::internal
