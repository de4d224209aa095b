#include "text/jinja_parser.h"

#include "text/jinja_parser_internal.h"

namespace epserve::text::jinja {
namespace internal {

StatusOr<Body> Parser::ParseTop() {
  std::string end_tag;
  return ParseBody({}, &end_tag, "", SourcePos{});
}

// Parses statements until a block tag named in `ends`; consumes `{% end_tag`.
StatusOr<Body> Parser::ParseBody(std::set<std::string> ends, std::string* end_tag,
                                 const std::string& opener, SourcePos open_pos) {
  Body body;
  while (true) {
    const Token& t = Cur();
    if (t.kind == TokenKind::kEnd) {
      if (ends.empty()) return body;
      return ErrorAt(origin_, open_pos,
                     "unexpected end of template: '" + opener + "' is never closed (expected '" +
                         "end" + opener + "')");
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
      static const std::set<std::string> kClosers = {
          "endfor", "endif", "endset", "endmacro", "endfilter", "endgeneration", "else", "elif"};
      if (name.kind == TokenKind::kName && kClosers.count(name.text)) {
        if (opener.empty())
          return ErrorAt(origin_, name.pos, "unexpected '" + name.text + "' outside of a block");
        return ErrorAt(origin_, name.pos,
                       "unexpected '" + name.text + "': '" + opener + "' opened at " +
                           std::to_string(open_pos.line) + ":" + std::to_string(open_pos.col) +
                           " is not closed (expected 'end" + opener + "')");
      }
      Advance();
      ASSIGN_OR_RETURN(StmtPtr s, ParseStatement());
      body.push_back(std::move(s));
    } else {
      return Error("unexpected " + Describe(t));
    }
  }
}

StatusOr<StmtPtr> Parser::ParseStatementImpl() {
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
    static const std::set<std::string> kUnsupported = {"include",    "import", "from", "extends",
                                                       "block",      "call",   "with", "raw",
                                                       "autoescape", "do",     "trans"};
    return ErrorAt(origin_, pos,
                   (kUnsupported.count(tag) ? "unsupported tag '" : "unknown tag '") + tag + "'");
  }
  RETURN_IF_ERROR(ExpectBlockEnd());
  return s;
}

// `| f(args) | g` applied to the block's text (Name(kBlockName)).
StatusOr<ExprPtr> Parser::ParseFilterChainOnBlock(bool leading_pipe) {
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

}  // namespace internal

StatusOr<std::unique_ptr<Template>> ParseTemplate(std::string_view source, std::string origin,
                                                  const LexOptions& options) {
  auto tpl = std::make_unique<Template>();
  tpl->origin = std::move(origin);
  ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source, tpl->origin, options));
  internal::Parser parser(std::move(tokens), tpl->origin);
  ASSIGN_OR_RETURN(tpl->body, parser.ParseTop());
  return tpl;
}

}  // namespace epserve::text::jinja
