// OutputText turns a request's generated ids into text pieces for the client: ids are
// detokenized incrementally (no piece ends inside a UTF-8 character), and stop strings are
// matched on the text: text that could be the start of a stop string is held back until it
// is known not to be one, and the output ends right before the first stop string found.
// Thread safety: one per request; the Tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace epserve::serve {

class OutputText {
 public:
  OutputText(const text::Tokenizer& tokenizer, std::vector<std::string> stop);
  // The text this id makes certain (possibly empty). After a stop string was found, adds nothing.
  std::string Add(int32_t id);
  // The held-back rest at the end of the generation (nothing after a stop string).
  std::string Finish();
  bool stopped() const { return stopped_; }

 private:
  std::string Release(std::string more);

  text::IncrementalDecoder decoder_;
  std::vector<std::string> stop_;
  std::string held_;  // decoded text not yet given out (a possible stop-string prefix)
  bool stopped_ = false;
};

// The text of one token for logprobs ("tokens", "token"): its decoding alone, lossy.
std::string TokenText(const text::Tokenizer& tokenizer, int32_t id);
// Its raw bytes (chat logprobs' "bytes"): may be part of a UTF-8 character.
std::vector<uint8_t> TokenBytes(const text::Tokenizer& tokenizer, int32_t id);

}  // namespace epserve::serve
