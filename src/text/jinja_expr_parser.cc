// Expression parsing, with jinja2's precedence: conditional < or < and < not < comparisons <
// + - < ~ < * / // % < ** < unary (then postfix, filters, tests).
#include "text/jinja_builtins.h"
#include "text/jinja_parser_internal.h"

namespace epserve::text::jinja::internal {

// An expression, or a tuple `a, b` (print and set values).
StatusOr<ExprPtr> Parser::ParseTupleExpr() {
  SourcePos pos = Cur().pos;
  ASSIGN_OR_RETURN(ExprPtr first, ParseExpression());
  if (!IsOp(",")) return first;
  ExprPtr tuple = MakeExpr(Expr::Kind::kList, pos);
  tuple->is_tuple = true;
  tuple->args.push_back(std::move(first));
  while (IsOp(",")) {
    Advance();
    if (Cur().kind == TokenKind::kBlockEnd || Cur().kind == TokenKind::kVarEnd) break;
    ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
    tuple->args.push_back(std::move(item));
  }
  return tuple;
}

StatusOr<ExprPtr> Parser::ParseConditional() {
  ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
  while (IsName("if")) {
    ExprPtr cond = MakeExpr(Expr::Kind::kCond, Cur().pos);
    Advance();
    ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
    ExprPtr otherwise;
    if (IsName("else")) {
      Advance();
      ASSIGN_OR_RETURN(otherwise, ParseExpression());
    }
    cond->args.push_back(std::move(test));
    cond->args.push_back(std::move(expr));
    cond->args.push_back(std::move(otherwise));
    expr = std::move(cond);
  }
  return expr;
}

StatusOr<ExprPtr> Parser::ParseBinary(SubParser sub, std::initializer_list<std::string_view> ops,
                                      bool word_ops) {
  ASSIGN_OR_RETURN(ExprPtr left, (this->*sub)());
  while (true) {
    std::string op;
    for (std::string_view o : ops) {
      if (word_ops ? IsName(o) : IsOp(o)) op = o;
    }
    if (op.empty()) return left;
    ExprPtr node = MakeExpr(Expr::Kind::kBinary, Cur().pos);
    node->name = op;
    Advance();
    ASSIGN_OR_RETURN(ExprPtr right, (this->*sub)());
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    left = std::move(node);
  }
}

StatusOr<ExprPtr> Parser::ParseNotImpl() {
  if (!IsName("not")) return ParseCompare();
  ExprPtr node = MakeExpr(Expr::Kind::kUnary, Cur().pos);
  node->name = "not";
  Advance();
  ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
  node->args.push_back(std::move(operand));
  return node;
}

StatusOr<ExprPtr> Parser::ParseCompare() {
  SourcePos pos = Cur().pos;
  ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
  ExprPtr node;
  while (true) {
    std::string op;
    if (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp("<=") || IsOp(">") || IsOp(">=")) {
      op = Cur().text;
      Advance();
    } else if (IsName("in")) {
      op = "in";
      Advance();
    } else if (IsName("not") && Peek().kind == TokenKind::kName && Peek().text == "in") {
      op = "not in";
      Advance();
      Advance();
    } else {
      break;
    }
    if (!node) {
      node = MakeExpr(Expr::Kind::kCompare, pos);
      node->args.push_back(std::move(first));
    }
    node->ops.push_back(op);
    ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
    node->args.push_back(std::move(operand));
  }
  return node ? std::move(node) : std::move(first);
}

StatusOr<ExprPtr> Parser::ParseUnaryImpl(bool with_filters) {
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    node = MakeExpr(Expr::Kind::kUnary, Cur().pos);
    node->name = Cur().text;
    Advance();
    ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
    node->args.push_back(std::move(operand));
  } else {
    ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (!with_filters) return node;
  while (true) {
    if (IsOp("|")) {
      Advance();
      ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
    } else if (IsName("is")) {
      Advance();
      ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (IsOp("(")) {
      ASSIGN_OR_RETURN(node, ParseCall(std::move(node), Expr::Kind::kCall));
    } else {
      return node;
    }
  }
}

StatusOr<ExprPtr> Parser::ParseFilter(ExprPtr value) {
  SourcePos pos = Cur().pos;
  ASSIGN_OR_RETURN(std::string name, ExpectName());
  if (!IsSupportedFilter(name)) return ErrorAt(origin_, pos, "unsupported filter '" + name + "'");
  ExprPtr node = MakeExpr(Expr::Kind::kFilter, pos);
  node->name = name;
  node->args.push_back(std::move(value));
  if (IsOp("(")) RETURN_IF_ERROR(ParseArgs(node.get()));
  return node;
}

StatusOr<ExprPtr> Parser::ParseTest(ExprPtr value) {
  ExprPtr node = MakeExpr(Expr::Kind::kTest, Cur().pos);
  if (IsName("not")) {
    node->negated = true;
    Advance();
  }
  SourcePos pos = Cur().pos;
  ASSIGN_OR_RETURN(node->name, ExpectName());
  if (!IsSupportedTest(node->name))
    return ErrorAt(origin_, pos, "unsupported test '" + node->name + "'");
  node->args.push_back(std::move(value));
  const Token& t = Cur();
  bool arg_start =
      t.kind == TokenKind::kString || t.kind == TokenKind::kInt || t.kind == TokenKind::kFloat ||
      (t.kind == TokenKind::kName && t.text != "else" && t.text != "or" && t.text != "and") ||
      (t.kind == TokenKind::kOp && (t.text == "[" || t.text == "{"));
  if (IsOp("(")) {
    RETURN_IF_ERROR(ParseArgs(node.get()));
  } else if (arg_start) {
    if (IsName("is")) return Error("cannot chain multiple tests with 'is'");
    ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
    ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
    node->args.push_back(std::move(arg));
  }
  return node;
}

StatusOr<ExprPtr> Parser::ParseCall(ExprPtr callee, Expr::Kind kind) {
  ExprPtr node = MakeExpr(kind, callee->pos);  // errors point at the function's name
  node->args.push_back(std::move(callee));
  RETURN_IF_ERROR(ParseArgs(node.get()));
  return node;
}

// `( a, b, key=c )` appended to node->args / node->kwargs.
Status Parser::ParseArgs(Expr* node) {
  RETURN_IF_ERROR(Expect(TokenKind::kOp, "(", "'('"));
  while (!IsOp(")")) {
    if (Cur().kind == TokenKind::kName && Peek().kind == TokenKind::kOp && Peek().text == "=") {
      std::string key = Cur().text;
      Advance();
      Advance();
      ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      node->kwargs.emplace_back(key, std::move(value));
    } else {
      if (!node->kwargs.empty()) return Error("positional argument after keyword argument");
      ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      node->args.push_back(std::move(value));
    }
    if (!IsOp(",")) break;
    Advance();
  }
  return Expect(TokenKind::kOp, ")", "')' or ','");
}

StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (IsOp(".")) {
      Advance();
      if (Cur().kind == TokenKind::kInt) {
        ExprPtr item = MakeExpr(Expr::Kind::kGetItem, Cur().pos);
        ExprPtr key = MakeExpr(Expr::Kind::kLiteral, Cur().pos);
        key->literal = Value::Int(ParseInt64(Cur().text).value_or(INT64_MAX));  // lexer-checked
        Advance();
        item->args.push_back(std::move(node));
        item->args.push_back(std::move(key));
        node = std::move(item);
        continue;
      }
      ExprPtr attr = MakeExpr(Expr::Kind::kGetAttr, Cur().pos);
      ASSIGN_OR_RETURN(attr->name, ExpectName());
      attr->args.push_back(std::move(node));
      node = std::move(attr);
    } else if (IsOp("[")) {
      SourcePos pos = Cur().pos;
      Advance();
      ExprPtr parts[3];
      int colons = 0;
      while (true) {
        if (!IsOp(":") && !IsOp("]")) {
          ASSIGN_OR_RETURN(parts[colons], ParseExpression());
        }
        if (!IsOp(":") || colons == 2) break;
        ++colons;
        Advance();
      }
      RETURN_IF_ERROR(Expect(TokenKind::kOp, "]", "']'"));
      ExprPtr sub = MakeExpr(colons > 0 ? Expr::Kind::kSlice : Expr::Kind::kGetItem, pos);
      sub->args.push_back(std::move(node));
      if (colons == 0 && !parts[0]) return ErrorAt(origin_, pos, "expected an expression in '[]'");
      for (int i = 0; i < (colons > 0 ? 3 : 1); ++i) sub->args.push_back(std::move(parts[i]));
      node = std::move(sub);
    } else if (IsOp("(")) {
      ASSIGN_OR_RETURN(node, ParseCall(std::move(node), Expr::Kind::kCall));
    } else {
      return node;
    }
  }
}

StatusOr<ExprPtr> Parser::ParsePrimary() {
  const Token& t = Cur();
  ExprPtr node = MakeExpr(Expr::Kind::kLiteral, t.pos);
  switch (t.kind) {
    case TokenKind::kName:
      if (t.text == "true" || t.text == "True") {
        node->literal = Value::Bool(true);
      } else if (t.text == "false" || t.text == "False") {
        node->literal = Value::Bool(false);
      } else if (t.text == "none" || t.text == "None") {
        node->literal = Value::None();
      } else {
        node->kind = Expr::Kind::kName;
        node->name = t.text;
      }
      Advance();
      return node;
    case TokenKind::kString: {
      std::string s;
      while (Cur().kind == TokenKind::kString) {  // adjacent literals concatenate
        s += Cur().text;
        Advance();
      }
      node->literal = Value::String(std::move(s));
      return node;
    }
    case TokenKind::kInt:
      node->literal = Value::Int(ParseInt64(t.text).value_or(INT64_MAX));  // lexer-checked
      Advance();
      return node;
    case TokenKind::kFloat:
      node->literal = Value::Float(std::strtod(t.text.c_str(), nullptr));  // 1e999 is inf
      Advance();
      return node;
    case TokenKind::kOp:
      if (t.text == "(") return ParseParenthesized();
      if (t.text == "[" || t.text == "{") return ParseListOrDict(t.text == "{");
      [[fallthrough]];
    default:
      return Error("unexpected " + Describe(t) + " in expression");
  }
}

StatusOr<ExprPtr> Parser::ParseParenthesized() {
  SourcePos pos = Cur().pos;
  Advance();
  if (IsOp(")")) {
    Advance();
    ExprPtr tuple = MakeExpr(Expr::Kind::kList, pos);
    tuple->is_tuple = true;
    return tuple;
  }
  ASSIGN_OR_RETURN(ExprPtr inner, ParseExpression());
  if (IsOp(",")) {
    ExprPtr tuple = MakeExpr(Expr::Kind::kList, pos);
    tuple->is_tuple = true;
    tuple->args.push_back(std::move(inner));
    while (IsOp(",")) {
      Advance();
      if (IsOp(")")) break;
      ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
      tuple->args.push_back(std::move(item));
    }
    inner = std::move(tuple);
  }
  RETURN_IF_ERROR(Expect(TokenKind::kOp, ")", "')'"));
  return inner;
}

StatusOr<ExprPtr> Parser::ParseListOrDict(bool is_dict) {
  ExprPtr node = MakeExpr(is_dict ? Expr::Kind::kDict : Expr::Kind::kList, Cur().pos);
  const char* close = is_dict ? "}" : "]";
  Advance();
  while (!IsOp(close)) {
    ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
    node->args.push_back(std::move(item));
    if (is_dict) {
      RETURN_IF_ERROR(Expect(TokenKind::kOp, ":", "':'"));
      ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      node->args.push_back(std::move(value));
    }
    if (!IsOp(",")) break;
    Advance();
  }
  RETURN_IF_ERROR(Expect(TokenKind::kOp, close, std::string("'") + close + "' or ','"));
  return node;
}

}  // namespace epserve::text::jinja::internal
