#include "text/added_vocab.h"

#include <utf8proc.h>

#include "text/utf8.h"

namespace epserve::text {

namespace {

bool IsSpaceByte(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Rust's char::is_whitespace on the character before/after a position.
bool IsWhitespace(char32_t c) {
  if (c < 0x80) return IsSpaceByte(static_cast<char>(c));
  const auto cat = utf8proc_category(c);
  return c == 0x85 || cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL ||
         cat == UTF8PROC_CATEGORY_ZP;
}

bool IsWordChar(char32_t c) {
  if (c == '_') return true;
  const auto cat = utf8proc_category(c);
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

// Start of the character that ends at `pos` (pos > 0).
size_t PrevCharStart(std::string_view s, size_t pos) {
  size_t p = pos - 1;
  while (p > 0 && (static_cast<uint8_t>(s[p]) & 0xC0) == 0x80) --p;
  return p;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens,
                                     const std::vector<std::string>& patterns)
    : tokens_(std::move(tokens)) {
  terminal_.push_back(-1);
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const std::string& p = patterns[i];
    if (p.empty()) continue;
    first_byte_[static_cast<uint8_t>(p[0])] = true;
    int32_t node = 0;
    for (unsigned char c : p) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | c;
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        it = edges_.emplace(key, static_cast<int32_t>(terminal_.size())).first;
        terminal_.push_back(-1);
      }
      node = it->second;
    }
    if (terminal_[node] < 0)
      terminal_[node] = static_cast<int32_t>(i);  // the first of duplicates wins
  }
}

int AddedTokenMatcher::LongestAt(std::string_view text, size_t pos, size_t* len) const {
  int best = -1;
  int32_t node = 0;
  for (size_t p = pos; p < text.size(); ++p) {
    auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[p]));
    if (it == edges_.end()) break;
    node = it->second;
    if (terminal_[node] >= 0) {
      best = terminal_[node];
      *len = p + 1 - pos;
    }
  }
  return best;
}

std::vector<TextSpan> AddedTokenMatcher::Split(std::string_view text) const {
  std::vector<TextSpan> spans;
  size_t text_begin = 0;  // start of the pending text span
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t len = 0;
    const int idx = LongestAt(text, pos, &len);
    if (idx < 0) {
      ++pos;
      continue;
    }
    const AddedToken& tok = tokens_[idx];
    size_t begin = pos, end = pos + len;
    if (tok.single_word) {
      bool ok = true;
      if (begin > 0) {
        size_t p = PrevCharStart(text, begin);
        ok &= !IsWordChar(NextCodePoint(text, &p));
      }
      if (end < text.size()) {
        size_t p = end;
        ok &= !IsWordChar(NextCodePoint(text, &p));
      }
      if (!ok) {
        ++pos;
        continue;
      }
    }
    if (tok.lstrip) {
      while (begin > text_begin) {
        const size_t p0 = PrevCharStart(text, begin);
        size_t p = p0;
        if (!IsWhitespace(NextCodePoint(text, &p))) break;
        begin = p0;
      }
    }
    if (tok.rstrip) {
      while (end < text.size()) {
        size_t p = end;
        if (!IsWhitespace(NextCodePoint(text, &p))) break;
        end = p;
      }
    }
    if (begin > text_begin) spans.push_back({text_begin, begin, -1});
    spans.push_back({begin, end, idx});
    text_begin = pos = end;
  }
  if (text_begin < text.size()) spans.push_back({text_begin, text.size(), -1});
  return spans;
}

}  // namespace epserve::text
