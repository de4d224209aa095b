// Added tokens (tokenizer.json's "added_tokens"): found in the text before pre-tokenization,
// leftmost match first and the longest at that position (Hugging Face's AddedVocabulary, an
// Aho-Corasick LeftmostLongest search). Tokens with normalized=false are matched on the raw
// text, the others on the normalized text. lstrip/rstrip widen a match over neighbouring
// whitespace; single_word rejects a match inside a word.
// Thread safety: immutable after construction.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace epserve::text {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// A part of the text: either an added token (token_idx >= 0) or text between them.
struct TextSpan {
  size_t begin, end;
  int token_idx;  // index into the matcher's tokens, or -1
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is what token i looks like in the text it is matched on (its content, or its
  // normalized content); empty patterns never match.
  AddedTokenMatcher(std::vector<AddedToken> tokens, const std::vector<std::string>& patterns);

  bool empty() const { return tokens_.empty(); }
  const AddedToken& token(int idx) const { return tokens_[idx]; }

  // Splits `text` into spans covering it in order (text spans may be empty and are then omitted).
  std::vector<TextSpan> Split(std::string_view text) const;

 private:
  // Longest pattern starting at text[pos]: its token index, or -1.
  int LongestAt(std::string_view text, size_t pos, size_t* len) const;

  std::vector<AddedToken> tokens_;
  // A byte trie: node -> (byte -> child); terminal[node] = token index or -1.
  std::unordered_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> terminal_;
  bool first_byte_[256] = {};
};

}  // namespace epserve::text
