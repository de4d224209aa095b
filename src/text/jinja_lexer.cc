#include "text/jinja_lexer.h"

#include <algorithm>
#include <charconv>

#include "text/jinja_value.h"

namespace epserve::text::jinja {

Status ErrorAt(const std::string& origin, SourcePos pos, const std::string& message) {
  return Status::InvalidArgument(origin + ":" + std::to_string(pos.line) + ":" +
                                 std::to_string(pos.col) + ": " + message);
}

namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

// Length in bytes of the Python-whitespace code point at s[i], or 0.
size_t PyWhitespaceAt(std::string_view s, size_t i) {
  unsigned char c = s[i];
  if (c < 0x80) return IsPyWhitespace(c) ? 1 : 0;
  size_t len = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + len > s.size()) return 0;
  std::u32string cp = DecodeUtf8(s.substr(i, len));
  return cp.size() == 1 && IsPyWhitespace(cp[0]) ? len : 0;
}

// Python str.rstrip() (all Unicode whitespace).
std::string_view RStripPy(std::string_view s) {
  std::u32string cps = DecodeUtf8(s);
  size_t keep = cps.size();
  while (keep > 0 && IsPyWhitespace(cps[keep - 1])) --keep;
  return s.substr(0, EncodeUtf8(std::u32string_view(cps).substr(0, keep)).size());
}

class Lexer {
 public:
  Lexer(std::string source, const std::string& origin, const LexOptions& options)
      : src_(std::move(source)), origin_(origin), options_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    while (pos < src_.size()) {
      size_t start = FindTagStart(pos);
      std::string_view text = std::string_view(src_).substr(pos, start - pos);
      if (start == src_.size()) {
        EmitText(text, pos);
        break;
      }
      char type = src_[start + 1];  // '{', '%' or '#'
      size_t inner = start + 2;
      char modifier =
          inner < src_.size() && (src_[inner] == '-' || src_[inner] == '+') ? src_[inner] : 0;
      if (modifier != 0) ++inner;
      if (modifier == '-') {
        text = RStripPy(text);
      } else if (options_.lstrip_blocks && type != '{' && modifier != '+') {
        size_t line_start = text.rfind('\n');
        line_start = line_start == std::string_view::npos ? 0 : line_start + 1;
        bool line_starting = line_start > 0 || pos == 0 || src_[pos - 1] == '\n';
        std::string_view tail = text.substr(line_start);
        bool blank = !tail.empty() &&
                     std::all_of(tail.begin(), tail.end(), [](char c) { return IsSpace(c); });
        if (line_starting && blank) text = text.substr(0, line_start);
      }
      EmitText(text, pos);
      if (type == '#') {
        ASSIGN_OR_RETURN(pos, SkipComment(start, inner));
        continue;
      }
      ASSIGN_OR_RETURN(pos, LexTag(start, inner, type == '%'));
    }
    tokens_.push_back(Token{TokenKind::kEnd, "", PosOf(src_.size())});
    return std::move(tokens_);
  }

 private:
  SourcePos PosOf(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line_idx = static_cast<size_t>(it - line_starts_.begin()) - 1;
    int col = 1;
    for (size_t i = line_starts_[line_idx]; i < offset && i < src_.size(); ++i) {
      if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) ++col;
    }
    return SourcePos{static_cast<int>(line_idx) + 1, col};
  }

  size_t FindTagStart(size_t pos) const {
    for (size_t i = pos; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return src_.size();
  }

  void EmitText(std::string_view text, size_t offset) {
    if (!text.empty()) tokens_.push_back(Token{TokenKind::kText, std::string(text), PosOf(offset)});
  }

  // After a tag's end: `-` strips all following whitespace, trim_blocks one newline.
  size_t AfterEnd(size_t pos, char modifier, bool is_block) const {
    if (modifier == '-') {
      while (pos < src_.size()) {
        size_t len = PyWhitespaceAt(src_, pos);
        if (len == 0) break;
        pos += len;
      }
    } else if (modifier == 0 && is_block && options_.trim_blocks && pos < src_.size() &&
               src_[pos] == '\n') {
      ++pos;
    }
    return pos;
  }

  StatusOr<size_t> SkipComment(size_t start, size_t inner) {
    size_t end = src_.find("#}", inner);
    if (end == std::string::npos)
      return ErrorAt(origin_, PosOf(start), "missing end of comment tag '#}'");
    char modifier =
        end > inner && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    return AfterEnd(end + 2, modifier, /*is_block=*/true);
  }

  StatusOr<size_t> LexTag(size_t start, size_t pos, bool is_block) {
    tokens_.push_back(
        Token{is_block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, "", PosOf(start)});
    std::vector<char> brackets;
    while (true) {
      while (pos < src_.size() && IsSpace(src_[pos])) ++pos;
      if (pos >= src_.size()) {
        return ErrorAt(origin_, PosOf(start),
                       std::string("unexpected end of template: missing '") +
                           (is_block ? "%}" : "}}") + "' for this tag");
      }
      std::string_view rest = std::string_view(src_).substr(pos);
      if (brackets.empty()) {
        const char* close = is_block ? "%}" : "}}";
        char modifier = (rest[0] == '-' || (is_block && rest[0] == '+')) ? rest[0] : 0;
        if (rest.substr(modifier != 0 ? 1 : 0, 2) == close) {
          tokens_.push_back(
              Token{is_block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, "", PosOf(pos)});
          return AfterEnd(pos + (modifier != 0 ? 3 : 2), modifier, is_block);
        }
      }
      char c = rest[0];
      SourcePos tpos = PosOf(pos);
      if (IsNameStart(c)) {
        size_t n = 1;
        while (n < rest.size() && IsNameChar(rest[n])) ++n;
        tokens_.push_back(Token{TokenKind::kName, std::string(rest.substr(0, n)), tpos});
        pos += n;
      } else if (IsDigit(c)) {
        ASSIGN_OR_RETURN(size_t n, LexNumber(pos));
        pos += n;
      } else if (c == '\'' || c == '"') {
        ASSIGN_OR_RETURN(size_t n, LexString(pos));
        pos += n;
      } else {
        static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (std::string_view two : kTwo) {
          if (rest.substr(0, 2) == two) op = two;
        }
        if (op.empty()) {
          if (std::string_view("+-*/%~<>=.,:|()[]{}").find(c) == std::string_view::npos) {
            return ErrorAt(origin_, tpos, std::string("unexpected character '") + c + "'");
          }
          op = std::string(1, c);
        }
        if (c == '(' || c == '[' || c == '{')
          brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
        if (c == ')' || c == ']' || c == '}') {
          if (brackets.empty() || brackets.back() != c) {
            return ErrorAt(origin_, tpos, std::string("unexpected '") + c + "'");
          }
          brackets.pop_back();
        }
        tokens_.push_back(Token{TokenKind::kOp, op, tpos});
        pos += op.size();
      }
    }
  }

  StatusOr<size_t> LexNumber(size_t pos) {
    size_t i = pos;
    auto digits = [&]() {
      while (i < src_.size() && (IsDigit(src_[i]) ||
                                 (src_[i] == '_' && i + 1 < src_.size() && IsDigit(src_[i + 1])))) {
        ++i;
      }
    };
    digits();
    bool is_float = false;
    bool after_dot = pos > 0 && src_[pos - 1] == '.';  // `foo.0.1` is two item lookups
    if (!after_dot && i + 1 < src_.size() && src_[i] == '.' && IsDigit(src_[i + 1])) {
      is_float = true;
      ++i;
      digits();
    }
    if (!after_dot && i < src_.size() && (src_[i] == 'e' || src_[i] == 'E')) {
      size_t j = i + 1;
      if (j < src_.size() && (src_[j] == '+' || src_[j] == '-')) ++j;
      if (j < src_.size() && IsDigit(src_[j])) {
        is_float = true;
        i = j;
        digits();
      }
    }
    std::string text = src_.substr(pos, i - pos);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    if (!is_float) {
      int64_t v = 0;
      auto res = std::from_chars(text.data(), text.data() + text.size(), v);
      if (res.ec != std::errc())
        return ErrorAt(origin_, PosOf(pos), "integer literal too large: " + text);
    }
    tokens_.push_back(Token{is_float ? TokenKind::kFloat : TokenKind::kInt, text, PosOf(pos)});
    return i - pos;
  }

  // Python's unicode-escape decoding of a string literal's body.
  StatusOr<size_t> LexString(size_t pos) {
    char quote = src_[pos];
    std::string value;
    size_t i = pos + 1;
    auto hex = [&](size_t count) -> StatusOr<char32_t> {
      if (i + count > src_.size())
        return ErrorAt(origin_, PosOf(i), "truncated escape in string literal");
      char32_t cp = 0;
      for (size_t k = 0; k < count; ++k) {
        char h = src_[i + k];
        int d = IsDigit(h)               ? h - '0'
                : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                         : -1;
        if (d < 0) return ErrorAt(origin_, PosOf(i), "truncated escape in string literal");
        cp = cp * 16 + d;
      }
      i += count;
      return cp;
    };
    while (true) {
      if (i >= src_.size()) return ErrorAt(origin_, PosOf(pos), "unterminated string literal");
      char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) return ErrorAt(origin_, PosOf(pos), "unterminated string literal");
      char e = src_[i + 1];
      i += 2;
      switch (e) {
        case '\n':
          break;
        case '\\':
        case '\'':
        case '"':
          value += e;
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'n':
          value += '\n';
          break;
        case 'r':
          value += '\r';
          break;
        case 't':
          value += '\t';
          break;
        case 'v':
          value += '\v';
          break;
        case 'x':
        case 'u':
        case 'U': {
          ASSIGN_OR_RETURN(char32_t cp, hex(e == 'x' ? 2 : e == 'u' ? 4 : 8));
          if (cp > 0x10FFFF)
            return ErrorAt(origin_, PosOf(i), "invalid \\U escape in string literal");
          AppendUtf8(cp, &value);
          break;
        }
        case 'N':
          return ErrorAt(origin_, PosOf(i - 2), "unsupported \\N{...} escape in string literal");
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = e - '0';
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k)
              cp = cp * 8 + (src_[i++] - '0');
            AppendUtf8(cp, &value);
          } else {
            value += '\\';
            value += e;
          }
      }
    }
    tokens_.push_back(Token{TokenKind::kString, std::move(value), PosOf(pos)});
    return i + 1 - pos;
  }

  std::string src_;
  const std::string& origin_;
  LexOptions options_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

StatusOr<std::vector<Token>> Tokenize(std::string_view source, const std::string& origin,
                                      const LexOptions& options) {
  // jinja2 normalizes \r\n and \r to \n, and (keep_trailing_newline=False) drops one final newline.
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized += source[i];
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  Lexer lexer(std::move(normalized), origin, options);
  return lexer.Run();
}

}  // namespace epserve::text::jinja
