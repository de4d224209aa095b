#include "text/utf8.h"

namespace epserve::text {

int Utf8SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

namespace {

// The allowed range of the second byte after `lead` (Unicode table 3-7).
void SecondByteRange(uint8_t lead, uint8_t* lo, uint8_t* hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (lead == 0xE0) *lo = 0xA0;
  if (lead == 0xED) *hi = 0x9F;
  if (lead == 0xF0) *lo = 0x90;
  if (lead == 0xF4) *hi = 0x8F;
}

// Length of the well-formed sequence at s[pos], or -k where k >= 1 is the length of the maximal
// ill-formed subpart there (k bytes to replace by one U+FFFD). With `allow_truncated`, a proper
// prefix of a sequence cut off by the end of `s` returns 0.
int Classify(std::string_view s, size_t pos, bool allow_truncated) {
  const uint8_t lead = static_cast<uint8_t>(s[pos]);
  const int n = Utf8SequenceLength(lead);
  if (n == 1) return 1;
  if (n == 0) return -1;
  uint8_t lo, hi;
  SecondByteRange(lead, &lo, &hi);
  for (int k = 1; k < n; ++k) {
    if (pos + k >= s.size()) return allow_truncated ? 0 : -k;
    const uint8_t b = static_cast<uint8_t>(s[pos + k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return -k;
  }
  return n;
}

}  // namespace

char32_t NextCodePoint(std::string_view s, size_t* pos) {
  const uint8_t b0 = static_cast<uint8_t>(s[*pos]);
  const int n = Utf8SequenceLength(b0);
  char32_t cp;
  switch (n) {
    case 2:
      cp = b0 & 0x1F;
      break;
    case 3:
      cp = b0 & 0x0F;
      break;
    case 4:
      cp = b0 & 0x07;
      break;
    default:
      ++*pos;
      return b0;
  }
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[*pos + k]) & 0x3F);
  *pos += n;
  return cp;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t FirstInvalidUtf8(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const int n = Classify(s, pos, /*allow_truncated=*/false);
    if (n <= 0) return pos;
    pos += n;
  }
  return s.size();
}

bool IsValidUtf8(std::string_view s) { return FirstInvalidUtf8(s) == s.size(); }

void AppendUtf8Lossy(std::string_view bytes, std::string* out) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t start = pos;
    while (pos < bytes.size() && static_cast<uint8_t>(bytes[pos]) < 0x80) ++pos;
    out->append(bytes.substr(start, pos - start));
    if (pos == bytes.size()) break;
    const int n = Classify(bytes, pos, /*allow_truncated=*/false);
    if (n > 0) {
      out->append(bytes.substr(pos, n));
      pos += n;
    } else {
      out->append("\xEF\xBF\xBD");
      pos += -n;
    }
  }
}

size_t IncompleteUtf8Tail(std::string_view bytes) {
  const size_t size = bytes.size();
  for (size_t back = 1; back <= 3 && back <= size; ++back) {
    const size_t pos = size - back;
    const uint8_t b = static_cast<uint8_t>(bytes[pos]);
    if (b >= 0x80 && b <= 0xBF) continue;  // a continuation byte: look further back
    return Classify(bytes, pos, /*allow_truncated=*/true) == 0 ? back : 0;
  }
  return 0;
}

const ByteLevelAlphabet& GetByteLevelAlphabet() {
  static const ByteLevelAlphabet* alphabet = [] {
    auto* a = new ByteLevelAlphabet;
    a->char_to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? b : next++;
      AppendUtf8(cp, &a->byte_to_char[b]);
      a->char_to_byte[cp] = static_cast<int16_t>(b);
    }
    return a;
  }();
  return *alphabet;
}

}  // namespace epserve::text
