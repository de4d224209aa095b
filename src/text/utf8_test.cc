#include "text/utf8.h"

#include <gtest/gtest.h>

namespace epserve::text {
namespace {

std::string Lossy(std::string_view s) {
  std::string out;
  AppendUtf8Lossy(s, &out);
  return out;
}

TEST(Utf8Test, ValidationRejectsOverlongsSurrogatesAndTruncation) {
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("h\xC3\xA9llo \xE4\xB8\xAD \xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // surrogate U+D800
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_EQ(FirstInvalidUtf8("ab\xE4\xB8"), 2u);  // truncated at the end
}

TEST(Utf8Test, LossyReplacesEachMaximalSubpart) {
  // WHATWG / Unicode "maximal subpart" practice: one U+FFFD per ill-formed prefix.
  EXPECT_EQ(Lossy("a\xE4\xB8"
                  "b"),
            "a\xEF\xBF\xBD"
            "b");  // a truncated 3-byte sequence: one U+FFFD
  EXPECT_EQ(Lossy("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // two stray continuation bytes
  EXPECT_EQ(Lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: 3
  EXPECT_EQ(Lossy("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
}

TEST(Utf8Test, IncompleteTailOnlyForCompletablePrefixes) {
  EXPECT_EQ(IncompleteUtf8Tail("ab"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xF0\x9F\x98"), 3u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xF0\x9F"), 2u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xE4"), 1u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xE4\xB8\xAD"), 0u);  // complete
  EXPECT_EQ(IncompleteUtf8Tail("a\xED\xA0"), 0u);      // never completable (surrogate)
  EXPECT_EQ(IncompleteUtf8Tail("a\x80"), 0u);          // stray continuation
}

TEST(Utf8Test, ByteLevelAlphabetIsGpt2s) {
  const ByteLevelAlphabet& a = GetByteLevelAlphabet();
  EXPECT_EQ(a.byte_to_char[' '], "\xC4\xA0");   // 'Ġ' (U+0120)
  EXPECT_EQ(a.byte_to_char['\n'], "\xC4\x8A");  // 'Ċ'
  EXPECT_EQ(a.byte_to_char['A'], "A");
  for (int b = 0; b < 256; ++b) {
    size_t pos = 0;
    const char32_t cp = NextCodePoint(a.byte_to_char[b], &pos);
    EXPECT_EQ(a.char_to_byte[cp], b);
  }
}

}  // namespace
}  // namespace epserve::text
