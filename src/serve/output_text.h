// OutputText turns a request's generated ids into text pieces for the client: ids are
// detokenized incrementally (no piece ends inside a UTF-8 character), and stop strings are
// matched on the text: text that could be the start of a stop string is held back until it
// is known not to be one, and the output ends right before the first stop string found.
// LogprobsJson and LogprobsText write the generated tokens' logprobs as the API does.
// Thread safety: one per request; the Tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "serve/openai_request.h"
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

// The logprobs of `tokens` (docs/serving-api.md, "Parameters"): chat's {"content": [...]};
// completions' {"text_offset", "token_logprobs", "tokens", "top_logprobs"}, the offsets
// counted from `text_offset` by the tokens' texts. A streamed chunk's.
nlohmann::json LogprobsJson(const text::Tokenizer& tokenizer, Endpoint endpoint,
                            const std::vector<const TokenEvent*>& tokens, size_t text_offset);

// The same for a whole answer, serialized as its tokens arrive: the text is exactly
// LogprobsJson(every token added, 0).dump(), but only one token's JSON tree is ever built, so
// an answer costs about its bytes rather than a tree of it (~10x them: issue 48).
class LogprobsText {
 public:
  LogprobsText(const text::Tokenizer& tokenizer, Endpoint endpoint);
  void Add(const TokenEvent& ev);  // REQUIRES: ev.token >= 0
  size_t size() const;             // the bytes AppendTo writes
  // Appends the JSON and frees what it held (the object is then empty, as if just made).
  void AppendTo(std::string* out);

 private:
  const text::Tokenizer& tokenizer_;
  Endpoint endpoint_;
  // Each array's elements, comma-separated, without brackets. Chat: content_ only.
  std::string content_, tokens_, token_logprobs_, top_logprobs_, text_offset_;
  size_t num_tokens_ = 0, offset_ = 0;
};

}  // namespace epserve::serve
