// DeepSeek-V3's special tokens, pre-tokenizer and chat template (verbatim from its tokenizer
// files), for the small tokenizers `epserve make-model` writes.
#pragma once

#include <string_view>
#include <vector>

namespace epserve::text {

struct SpecialTokenSpec {
  const char* content;
  bool special;     // tokenizer.json's "special"
  bool normalized;  // tokenizer.json's "normalized"
};

// In DeepSeek-V3's id order: <｜begin▁of▁sentence｜> (BOS, id 0), <｜end▁of▁sentence｜> (EOS, id
// 1), <｜▁pad▁｜> (id 2), then the chat and tool-call tokens (ids 128800.. in DeepSeek-V3).
const std::vector<SpecialTokenSpec>& DeepSeekV3SpecialTokens();
// tokenizer.json's "pre_tokenizer" object, as JSON text.
std::string_view DeepSeekV3PreTokenizerJson();
// tokenizer_config.json's "chat_template".
std::string_view DeepSeekV3ChatTemplate();

}  // namespace epserve::text
