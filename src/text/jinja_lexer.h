// Jinja lexer: template text -> tokens, applying whitespace control the way jinja2's lexer does
// in the environment transformers uses (trim_blocks, lstrip_blocks, `-`/`+` modifiers, newline
// normalization and the dropped final newline of keep_trailing_newline=False).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace epserve::text::jinja {

struct SourcePos {
  int line = 1;
  int col = 1;
};

enum class TokenKind {
  kText,        // literal template data (already whitespace-controlled)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the decoded value
  kInt,
  kFloat,
  kOp,  // text holds the operator: + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { }
  kEnd,
};

struct Token {
  TokenKind kind;
  std::string text;
  SourcePos pos;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Errors are "origin:line:col: message".
StatusOr<std::vector<Token>> Tokenize(std::string_view source, const std::string& origin,
                                      const LexOptions& options);

// "origin:line:col: message" as an InvalidArgument status.
Status ErrorAt(const std::string& origin, SourcePos pos, const std::string& message);

}  // namespace epserve::text::jinja
