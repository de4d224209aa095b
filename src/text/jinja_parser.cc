#include "text/jinja_parser.h"

#include <set>

#include "text/jinja_builtins.h"

namespace epserve::text::jinja {
namespace {

ExprPtr MakeExpr(Expr::Kind kind, SourcePos pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

std::string Describe(const Token& t) {
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
  Parser(std::vector<Token> tokens, const std::string& origin) : toks_(std::move(tokens)), origin_(origin) {}

  StatusOr<Body> ParseTop() {
    std::string end_tag;
    return ParseBody({}, &end_tag, "", SourcePos{});
  }

 private:
  const Token& Cur() const { return toks_[idx_]; }
  const Token& Peek(size_t k = 1) const { return toks_[std::min(idx_ + k, toks_.size() - 1)]; }
  bool IsOp(std::string_view op) const { return Cur().kind == TokenKind::kOp && Cur().text == op; }
  bool IsName(std::string_view name) const { return Cur().kind == TokenKind::kName && Cur().text == name; }
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
  StatusOr<Body> ParseBody(std::set<std::string> ends, std::string* end_tag, const std::string& opener,
                           SourcePos open_pos) {
    Body body;
    while (true) {
      const Token& t = Cur();
      if (t.kind == TokenKind::kEnd) {
        if (ends.empty()) return body;
        return ErrorAt(origin_, open_pos,
                       "unexpected end of template: '" + opener + "' is never closed (expected '" + "end" + opener +
                           "')");
      }
      if (t.kind == TokenKind::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->pos = t.pos;
        s->text = t.text;
        body.push_back(std::move(s));
        Advance();
      } else if (t.kind == TokenKind::kVarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kPrint;
        s->pos = t.pos;
        Advance();
        ASSIGN_OR_RETURN(s->expr, ParseTupleExpr());
        RETURN_IF_ERROR(Expect(TokenKind::kVarEnd, "", "'}}'"));
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kBlockBegin) {
        const Token& name = Peek();
        if (name.kind == TokenKind::kName && ends.count(name.text)) {
          *end_tag = name.text;
          Advance();
          Advance();
          return body;
        }
        static const std::set<std::string> kClosers = {"endfor",    "endif",     "endset",        "endmacro",
                                                       "endfilter", "endgeneration", "else", "elif"};
        if (name.kind == TokenKind::kName && kClosers.count(name.text)) {
          if (opener.empty()) return ErrorAt(origin_, name.pos, "unexpected '" + name.text + "' outside of a block");
          return ErrorAt(origin_, name.pos,
                         "unexpected '" + name.text + "': '" + opener + "' opened at " + std::to_string(open_pos.line) +
                             ":" + std::to_string(open_pos.col) + " is not closed (expected 'end" + opener + "')");
        }
        Advance();
        ASSIGN_OR_RETURN(StmtPtr s, ParseStatement());
        body.push_back(std::move(s));
      } else {
        return Error("unexpected " + Describe(t));
      }
    }
  }

  StatusOr<StmtPtr> ParseStatement() {
    if (Cur().kind != TokenKind::kName) return Error("expected a tag name, got " + Describe(Cur()));
    std::string tag = Cur().text;
    SourcePos pos = Cur().pos;
    auto s = std::make_unique<Stmt>();
    s->pos = pos;
    Advance();
    std::string end_tag;
    if (tag == "if") {
      s->kind = Stmt::Kind::kIf;
      while (true) {
        ASSIGN_OR_RETURN(ExprPtr cond, ParseExpression());
        RETURN_IF_ERROR(ExpectBlockEnd());
        s->conds.push_back(std::move(cond));
        ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}, &end_tag, "if", pos));
        s->bodies.push_back(std::move(body));
        if (end_tag != "elif") break;
      }
      if (end_tag == "else") {
        RETURN_IF_ERROR(ExpectBlockEnd());
        ASSIGN_OR_RETURN(s->else_body, ParseBody({"endif"}, &end_tag, "if", pos));
      }
    } else if (tag == "for") {
      s->kind = Stmt::Kind::kFor;
      do {
        ASSIGN_OR_RETURN(std::string target, ExpectName());
        s->targets.push_back(target);
      } while (IsOp(",") && (Advance(), true));
      RETURN_IF_ERROR(Expect(TokenKind::kName, "in", "'in'"));
      ASSIGN_OR_RETURN(s->expr, ParseOr());
      if (IsName("if")) {
        Advance();
        ASSIGN_OR_RETURN(s->cond, ParseExpression());
      }
      if (IsName("recursive")) return Error("unsupported: recursive for loops");
      RETURN_IF_ERROR(ExpectBlockEnd());
      ++loop_depth_;
      ASSIGN_OR_RETURN(s->body, ParseBody({"else", "endfor"}, &end_tag, "for", pos));
      --loop_depth_;
      if (end_tag == "else") {
        RETURN_IF_ERROR(ExpectBlockEnd());
        ASSIGN_OR_RETURN(s->else_body, ParseBody({"endfor"}, &end_tag, "for", pos));
      }
    } else if (tag == "set") {
      ASSIGN_OR_RETURN(std::string target, ExpectName());
      s->targets.push_back(target);
      if (IsOp(".")) {
        Advance();
        ASSIGN_OR_RETURN(s->attr, ExpectName());
      }
      while (s->attr.empty() && IsOp(",")) {
        Advance();
        ASSIGN_OR_RETURN(std::string more, ExpectName());
        s->targets.push_back(more);
      }
      if (IsOp("=")) {
        s->kind = Stmt::Kind::kSet;
        Advance();
        ASSIGN_OR_RETURN(s->expr, ParseTupleExpr());
      } else {
        if (s->targets.size() != 1 || !s->attr.empty()) return Error("expected '=' in set");
        s->kind = Stmt::Kind::kSetBlock;
        if (IsOp("|")) {
          ASSIGN_OR_RETURN(s->filter, ParseFilterChainOnBlock());
        }
        RETURN_IF_ERROR(ExpectBlockEnd());
        ASSIGN_OR_RETURN(s->body, ParseBody({"endset"}, &end_tag, "set", pos));
      }
    } else if (tag == "macro") {
      s->kind = Stmt::Kind::kMacro;
      ASSIGN_OR_RETURN(s->name, ExpectName());
      RETURN_IF_ERROR(Expect(TokenKind::kOp, "(", "'('"));
      while (!IsOp(")")) {
        MacroParam p;
        ASSIGN_OR_RETURN(p.name, ExpectName());
        if (IsOp("=")) {
          Advance();
          ASSIGN_OR_RETURN(p.default_value, ParseExpression());
        }
        s->params.push_back(std::move(p));
        if (!IsOp(",")) break;
        Advance();
      }
      RETURN_IF_ERROR(Expect(TokenKind::kOp, ")", "')'"));
      RETURN_IF_ERROR(ExpectBlockEnd());
      int saved_depth = loop_depth_;
      loop_depth_ = 0;
      ASSIGN_OR_RETURN(s->body, ParseBody({"endmacro"}, &end_tag, "macro", pos));
      loop_depth_ = saved_depth;
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return ErrorAt(origin_, pos, "'" + tag + "' outside of a for loop");
      s->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    } else if (tag == "filter") {
      s->kind = Stmt::Kind::kFilterBlock;
      ASSIGN_OR_RETURN(s->filter, ParseFilterChainOnBlock(/*leading_pipe=*/false));
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(s->body, ParseBody({"endfilter"}, &end_tag, "filter", pos));
    } else if (tag == "generation") {
      s->kind = Stmt::Kind::kGeneration;
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(s->body, ParseBody({"endgeneration"}, &end_tag, "generation", pos));
    } else {
      static const std::set<std::string> kUnsupported = {"include", "import", "from",  "extends", "block", "call",
                                                         "with",    "raw",    "autoescape", "do", "trans"};
      return ErrorAt(origin_, pos, (kUnsupported.count(tag) ? "unsupported tag '" : "unknown tag '") + tag + "'");
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  // `| f(args) | g` applied to the block's text (Name(kBlockName)).
  StatusOr<ExprPtr> ParseFilterChainOnBlock(bool leading_pipe = true) {
    ExprPtr node = MakeExpr(Expr::Kind::kName, Cur().pos);
    node->name = kBlockName;
    bool first = true;
    while ((first && !leading_pipe) || IsOp("|")) {
      if (!(first && !leading_pipe)) Advance();
      first = false;
      ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
    }
    return node;
  }

  // An expression, or a tuple `a, b` (print and set values).
  StatusOr<ExprPtr> ParseTupleExpr() {
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

  StatusOr<ExprPtr> ParseExpression() {
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

  using SubParser = StatusOr<ExprPtr> (Parser::*)();
  StatusOr<ExprPtr> ParseBinary(SubParser sub, std::initializer_list<std::string_view> ops, bool word_ops) {
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
  StatusOr<ExprPtr> ParseOr() { return ParseBinary(&Parser::ParseAnd, {"or"}, true); }
  StatusOr<ExprPtr> ParseAnd() { return ParseBinary(&Parser::ParseNot, {"and"}, true); }
  StatusOr<ExprPtr> ParseNot() {
    if (!IsName("not")) return ParseCompare();
    ExprPtr node = MakeExpr(Expr::Kind::kUnary, Cur().pos);
    node->name = "not";
    Advance();
    ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
    node->args.push_back(std::move(operand));
    return node;
  }
  StatusOr<ExprPtr> ParseCompare() {
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
  StatusOr<ExprPtr> ParseMath1() { return ParseBinary(&Parser::ParseConcat, {"+", "-"}, false); }
  StatusOr<ExprPtr> ParseConcat() { return ParseBinary(&Parser::ParseMath2, {"~"}, false); }
  StatusOr<ExprPtr> ParseMath2() { return ParseBinary(&Parser::ParsePow, {"*", "/", "//", "%"}, false); }
  StatusOr<ExprPtr> ParsePow() { return ParseBinary(&Parser::ParseUnaryWithFilters, {"**"}, false); }
  StatusOr<ExprPtr> ParseUnaryWithFilters() { return ParseUnary(true); }

  StatusOr<ExprPtr> ParseUnary(bool with_filters) {
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

  StatusOr<ExprPtr> ParseFilter(ExprPtr value) {
    SourcePos pos = Cur().pos;
    ASSIGN_OR_RETURN(std::string name, ExpectName());
    if (!IsSupportedFilter(name)) return ErrorAt(origin_, pos, "unsupported filter '" + name + "'");
    ExprPtr node = MakeExpr(Expr::Kind::kFilter, pos);
    node->name = name;
    node->args.push_back(std::move(value));
    if (IsOp("(")) RETURN_IF_ERROR(ParseArgs(node.get()));
    return node;
  }

  StatusOr<ExprPtr> ParseTest(ExprPtr value) {
    ExprPtr node = MakeExpr(Expr::Kind::kTest, Cur().pos);
    if (IsName("not")) {
      node->negated = true;
      Advance();
    }
    SourcePos pos = Cur().pos;
    ASSIGN_OR_RETURN(node->name, ExpectName());
    if (!IsSupportedTest(node->name)) return ErrorAt(origin_, pos, "unsupported test '" + node->name + "'");
    node->args.push_back(std::move(value));
    const Token& t = Cur();
    bool arg_start = t.kind == TokenKind::kString || t.kind == TokenKind::kInt || t.kind == TokenKind::kFloat ||
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

  StatusOr<ExprPtr> ParseCall(ExprPtr callee, Expr::Kind kind) {
    ExprPtr node = MakeExpr(kind, callee->pos);  // errors point at the function's name
    node->args.push_back(std::move(callee));
    RETURN_IF_ERROR(ParseArgs(node.get()));
    return node;
  }

  // `( a, b, key=c )` appended to node->args / node->kwargs.
  Status ParseArgs(Expr* node) {
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

  StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".")) {
        Advance();
        if (Cur().kind == TokenKind::kInt) {
          ExprPtr item = MakeExpr(Expr::Kind::kGetItem, Cur().pos);
          ExprPtr key = MakeExpr(Expr::Kind::kLiteral, Cur().pos);
          key->literal = Value::Int(std::stoll(Cur().text));
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

  StatusOr<ExprPtr> ParsePrimary() {
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
        node->literal = Value::Int(std::stoll(t.text));
        Advance();
        return node;
      case TokenKind::kFloat:
        node->literal = Value::Float(std::stod(t.text));
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

  StatusOr<ExprPtr> ParseParenthesized() {
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

  StatusOr<ExprPtr> ParseListOrDict(bool is_dict) {
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

  std::vector<Token> toks_;
  const std::string& origin_;
  size_t idx_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<Template>> ParseTemplate(std::string_view source, std::string origin,
                                                  const LexOptions& options) {
  auto tpl = std::make_unique<Template>();
  tpl->origin = std::move(origin);
  ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source, tpl->origin, options));
  Parser parser(std::move(tokens), tpl->origin);
  ASSIGN_OR_RETURN(tpl->body, parser.ParseTop());
  return tpl;
}

}  // namespace epserve::text::jinja
