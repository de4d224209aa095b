// UTF-8 helpers for the tokenizer: validation, lossy decoding (U+FFFD for each maximal invalid
// subpart, as WHATWG's TextDecoder and Rust's from_utf8_lossy do), the incomplete-tail test the
// incremental decoder needs, and GPT-2's byte-level alphabet.
// Thread safety: pure functions; the byte-level tables are immutable after first use.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace epserve::text {

// Length of the UTF-8 sequence starting with `lead` (1..4), or 0 for a byte that cannot start one.
int Utf8SequenceLength(uint8_t lead);

// Decodes the code point at s[*pos] (s must be valid UTF-8) and advances *pos past it.
char32_t NextCodePoint(std::string_view s, size_t* pos);

// Appends the UTF-8 encoding of `cp` to `out`.
void AppendUtf8(char32_t cp, std::string* out);

// True when `s` is well-formed UTF-8 (no surrogates, no overlongs, <= U+10FFFF).
bool IsValidUtf8(std::string_view s);
// Byte offset of the first ill-formed sequence, or s.size() when valid.
size_t FirstInvalidUtf8(std::string_view s);

// Appends `bytes` to `out` with every maximal ill-formed subpart replaced by U+FFFD.
void AppendUtf8Lossy(std::string_view bytes, std::string* out);

// Length of the trailing bytes of `bytes` that form a proper prefix of a well-formed sequence
// (a character that more bytes could complete): 0..3. Lossy decoding of the rest never depends
// on what follows, so an incremental decoder can emit everything before that tail.
size_t IncompleteUtf8Tail(std::string_view bytes);

// GPT-2's byte-level alphabet: every byte maps to one printable code point (as UTF-8).
struct ByteLevelAlphabet {
  std::array<std::string, 256> byte_to_char;
  // Code point (< 324) -> byte, or -1 for a code point outside the alphabet.
  std::array<int16_t, 324> char_to_byte;
};
const ByteLevelAlphabet& GetByteLevelAlphabet();

}  // namespace epserve::text
