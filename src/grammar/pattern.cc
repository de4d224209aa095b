#include "grammar/pattern.h"

#include <bitset>
#include <cstdio>
#include <vector>

#include "grammar/json_values.h"

namespace epserve::grammar::json {

namespace {

using Expr = GrammarBuilder::Expr;

constexpr int kMaxRepeat = 1000;
// Groups nested deeper are refused: the parser recurses once per level (Python's re allows
// about 100 before "too many nested parentheses"; real patterns nest a few).
constexpr int kMaxGroupDepth = 128;

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// A set of characters: ASCII ones, all non-ASCII ones, or listed non-ASCII ones.
struct CharClass {
  std::bitset<128> ascii;
  bool all_non_ascii = false;
  std::vector<uint32_t> non_ascii;
};

// How an ASCII character appears inside a JSON string.
std::string JsonEncoded(uint32_t c) {
  switch (c) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\t':
      return "\\t";
    case '\r':
      return "\\r";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    default:
      break;
  }
  if (c < 0x20) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "\\u%04x", c);
    return buf;
  }
  return std::string(1, static_cast<char>(c));
}

Expr ClassExpr(GrammarBuilder& b, const CharClass& cls) {
  std::vector<Expr> alts;
  for (uint32_t c = 0; c < 128; ++c) {
    if (cls.ascii[c]) alts.push_back(b.Literal(JsonEncoded(c)));  // single bytes merge in Alt
  }
  if (cls.all_non_ascii) alts.push_back(NonAsciiChar(b));
  for (uint32_t cp : cls.non_ascii) alts.push_back(b.Literal(Utf8(cp)));
  if (alts.empty()) return -1;
  return b.Alt(std::move(alts));
}

class PatternParser {
 public:
  PatternParser(GrammarBuilder& b, const std::string& pattern) : b_(b), pattern_(pattern) {}

  StatusOr<Expr> Parse() {
    RETURN_IF_ERROR(Decode());
    bool start = false, end = false;
    if (!cps_.empty() && cps_[0] == '^') {
      start = true;
      pos_ = 1;
    }
    if (cps_.size() > pos_ && cps_.back() == '$' &&
        !(cps_.size() >= 2 && cps_[cps_.size() - 2] == '\\')) {
      end = true;
      cps_.pop_back();
    }
    ASSIGN_OR_RETURN(Expr body, ParseAlt());
    if (pos_ != cps_.size()) return Error("unexpected ')'");
    const Expr any = b_.Star(StringChar(b_));
    std::vector<Expr> seq = {b_.Literal("\"")};
    if (!start) seq.push_back(any);
    seq.push_back(body);
    if (!end) seq.push_back(any);
    seq.push_back(b_.Literal("\""));
    return b_.Seq(std::move(seq));
  }

 private:
  Status Error(const std::string& what) const {
    // A long pattern is quoted by its start (a request may send 1 MB of it).
    size_t cut = pattern_.size() <= 80 ? pattern_.size() : 60;
    while (cut > 0 && cut < pattern_.size() && (static_cast<uint8_t>(pattern_[cut]) & 0xC0) == 0x80)
      --cut;  // not inside a UTF-8 sequence
    const std::string quoted =
        cut == pattern_.size()
            ? pattern_
            : pattern_.substr(0, cut) + "... (" + std::to_string(pattern_.size()) + " bytes)";
    return Status::InvalidArgument("unsupported pattern '" + quoted + "': " + what);
  }

  Status Decode() {
    for (size_t i = 0; i < pattern_.size();) {
      const uint8_t c = static_cast<uint8_t>(pattern_[i]);
      int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      if (i + len > pattern_.size()) return Error("invalid UTF-8");
      uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
      for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(pattern_[i + k]) & 0x3F);
      cps_.push_back(cp);
      i += len;
    }
    return Status::Ok();
  }

  bool AtEnd() const { return pos_ >= cps_.size(); }
  uint32_t Peek() const { return cps_[pos_]; }

  StatusOr<Expr> ParseAlt() {
    std::vector<Expr> alts;
    ASSIGN_OR_RETURN(Expr first, ParseSeq());
    alts.push_back(first);
    while (!AtEnd() && Peek() == '|') {
      ++pos_;
      ASSIGN_OR_RETURN(Expr next, ParseSeq());
      alts.push_back(next);
    }
    return b_.Alt(std::move(alts));
  }

  StatusOr<Expr> ParseSeq() {
    std::vector<Expr> items;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      ASSIGN_OR_RETURN(Expr atom, ParseAtom());
      ASSIGN_OR_RETURN(Expr quantified, ParseQuantifier(atom));
      items.push_back(quantified);
    }
    return items.empty() ? b_.Empty() : b_.Seq(std::move(items));
  }

  StatusOr<int> ParseInt() {
    int v = 0;
    bool any = false;
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
      v = v * 10 + static_cast<int>(Peek() - '0');
      if (v > kMaxRepeat) return Error("repeat count over " + std::to_string(kMaxRepeat));
      any = true;
      ++pos_;
    }
    if (!any) return Error("expected a number in {m,n}");
    return v;
  }

  StatusOr<Expr> ParseQuantifier(Expr atom) {
    if (AtEnd()) return atom;
    int min = 1, max = 1;
    const uint32_t c = Peek();
    if (c == '?') {
      min = 0;
    } else if (c == '*') {
      min = 0;
      max = -1;
    } else if (c == '+') {
      max = -1;
    } else if (c == '{') {
      ++pos_;
      ASSIGN_OR_RETURN(min, ParseInt());
      max = min;
      if (!AtEnd() && Peek() == ',') {
        ++pos_;
        if (!AtEnd() && Peek() == '}') {
          max = -1;
        } else {
          ASSIGN_OR_RETURN(max, ParseInt());
        }
      }
      if (AtEnd() || Peek() != '}') return Error("expected '}'");
      if (max >= 0 && max < min) return Error("{m,n} with n < m");
    } else {
      return atom;
    }
    ++pos_;
    if (!AtEnd() && Peek() == '?') ++pos_;  // lazy: the same language
    if (!AtEnd() && (Peek() == '*' || Peek() == '+' || Peek() == '?' || Peek() == '{')) {
      return Error("nested quantifier");
    }
    return b_.Repeat(atom, min, max);
  }

  StatusOr<Expr> ParseAtom() {
    const uint32_t c = Peek();
    ++pos_;
    switch (c) {
      case '(': {
        if (!AtEnd() && Peek() == '?') {
          if (pos_ + 1 < cps_.size() && cps_[pos_ + 1] == ':') {
            pos_ += 2;
          } else {
            return Error("only (?:...) groups are supported");
          }
        }
        if (++depth_ > kMaxGroupDepth)
          return Error("groups nested deeper than " + std::to_string(kMaxGroupDepth));
        ASSIGN_OR_RETURN(Expr inner, ParseAlt());
        --depth_;
        if (AtEnd() || Peek() != ')') return Error("missing ')'");
        ++pos_;
        return inner;
      }
      case '[':
        return ParseClass();
      case '.': {
        CharClass cls;
        cls.ascii.set();
        cls.ascii.reset('\n');
        cls.all_non_ascii = true;
        return ClassExpr(b_, cls);
      }
      case '^':
      case '$':
        return Error("'^' and '$' only at the start and the end");
      case '*':
      case '+':
      case '?':
      case '{':
        return Error("quantifier without an operand");
      case '\\': {
        CharClass cls;
        RETURN_IF_ERROR(ParseEscape(&cls, /*in_class=*/false));
        return ClassExpr(b_, cls);
      }
      default:
        return Char(c);
    }
  }

  Expr Char(uint32_t c) { return c < 0x80 ? b_.Literal(JsonEncoded(c)) : b_.Literal(Utf8(c)); }

  static void AddChar(CharClass* cls, uint32_t c) {
    if (c < 128) {
      cls->ascii.set(c);
    } else {
      cls->non_ascii.push_back(c);
    }
  }

  static void AddShorthand(uint32_t c, std::bitset<128>* set) {
    for (uint32_t x = 0; x < 128; ++x) {
      const bool digit = x >= '0' && x <= '9';
      const bool word = digit || (x >= 'a' && x <= 'z') || (x >= 'A' && x <= 'Z') || x == '_';
      const bool space = x == ' ' || (x >= '\t' && x <= '\r');
      if ((c == 'd' && digit) || (c == 'w' && word) || (c == 's' && space)) set->set(x);
    }
  }

  // After a backslash.
  Status ParseEscape(CharClass* cls, bool in_class) {
    if (AtEnd()) return Error("trailing backslash");
    const uint32_t c = Peek();
    ++pos_;
    switch (c) {
      case 'd':
      case 'w':
      case 's':
        AddShorthand(c, &cls->ascii);
        return Status::Ok();
      case 'D':
      case 'W':
      case 'S': {
        if (in_class) return Error("\\D, \\W and \\S inside [...]");
        std::bitset<128> positive;
        AddShorthand(c - 'A' + 'a', &positive);
        cls->ascii |= ~positive;
        return Status::Ok();
      }
      case 'n':
        AddChar(cls, '\n');
        return Status::Ok();
      case 't':
        AddChar(cls, '\t');
        return Status::Ok();
      case 'r':
        AddChar(cls, '\r');
        return Status::Ok();
      case 'f':
        AddChar(cls, '\f');
        return Status::Ok();
      case 'v':
        AddChar(cls, '\v');
        return Status::Ok();
      case 'u': {
        uint32_t cp = 0;
        for (int k = 0; k < 4; ++k) {
          if (AtEnd()) return Error("short \\u escape");
          const uint32_t h = Peek();
          ++pos_;
          int v = h >= '0' && h <= '9'   ? int(h - '0')
                  : h >= 'a' && h <= 'f' ? int(h - 'a' + 10)
                  : h >= 'A' && h <= 'F' ? int(h - 'A' + 10)
                                         : -1;
          if (v < 0) return Error("bad \\u escape");
          cp = cp * 16 + static_cast<uint32_t>(v);
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) return Error("surrogate \\u escape");
        AddChar(cls, cp);
        return Status::Ok();
      }
      default:
        if (c < 128 &&
            !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
          AddChar(cls, c);  // an escaped metacharacter or punctuation
          return Status::Ok();
        }
        return Error(std::string("escape '\\") + Utf8(c) + "'");
    }
  }

  StatusOr<Expr> ParseClass() {
    CharClass cls;
    bool negate = false;
    if (!AtEnd() && Peek() == '^') {
      negate = true;
      ++pos_;
    }
    bool first = true;
    while (true) {
      if (AtEnd()) return Error("missing ']'");
      uint32_t c = Peek();
      if (c == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      ++pos_;
      if (c == '\\') {
        CharClass one;
        RETURN_IF_ERROR(ParseEscape(&one, true));
        if (one.ascii.count() + one.non_ascii.size() != 1 || AtEnd() || Peek() != '-' ||
            pos_ + 1 >= cps_.size() || cps_[pos_ + 1] == ']') {
          cls.ascii |= one.ascii;
          cls.non_ascii.insert(cls.non_ascii.end(), one.non_ascii.begin(), one.non_ascii.end());
          continue;
        }
        if (!one.non_ascii.empty()) return Error("non-ASCII range in [...]");
        for (c = 0; !one.ascii[c]; ++c) {
        }
      }
      if (!AtEnd() && Peek() == '-' && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi = Peek();
        ++pos_;
        if (hi == '\\') {
          CharClass one;
          RETURN_IF_ERROR(ParseEscape(&one, true));
          if (one.ascii.count() != 1 || !one.non_ascii.empty()) return Error("bad range in [...]");
          for (hi = 0; !one.ascii[hi]; ++hi) {
          }
        }
        if (hi < c) return Error("reversed range in [...]");
        if (hi >= 128) return Error("non-ASCII range in [...]");
        for (uint32_t x = c; x <= hi; ++x) cls.ascii.set(x);
        continue;
      }
      AddChar(&cls, c);
    }
    if (negate) {
      if (!cls.non_ascii.empty()) return Error("non-ASCII characters in [^...]");
      cls.ascii = ~cls.ascii;
      cls.all_non_ascii = true;
    }
    const Expr e = ClassExpr(b_, cls);
    if (e < 0) return Error("empty character class");
    return e;
  }

  GrammarBuilder& b_;
  const std::string& pattern_;
  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
  int depth_ = 0;  // groups open
};

}  // namespace

StatusOr<GrammarBuilder::Expr> PatternString(GrammarBuilder& b, const std::string& pattern) {
  PatternParser parser(b, pattern);
  return parser.Parse();
}

}  // namespace epserve::grammar::json
