// A small deterministic byte-level BPE trainer and the writer of the tokenizer files
// `epserve make-model` puts beside every synthetic checkpoint.
//
// Layout of the vocabulary (exactly options.vocab_size ids, like DeepSeek-V3's): ids 0, 1, 2 are
// <｜begin▁of▁sentence｜> (BOS), <｜end▁of▁sentence｜> (EOS) and <｜▁pad▁｜>; then the 256 byte
// tokens; then the learned merges; the last ids are DeepSeek-V3's chat and tool-call tokens. The
// pre-tokenizer and chat template are DeepSeek-V3's own.
//
// Training: the corpus is pre-tokenized; the most frequent adjacent pair (ties: the smallest
// merged string, then the smallest pair of ids) is merged until the vocabulary is full. When
// the corpus has no pair left, deterministic filler merges (existing token + a common byte)
// fill the rest, so any vocab_size >= 256 + number of special tokens works.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace epserve::text {

struct BpeTrainerOptions {
  int vocab_size = 1024;  // total ids, special tokens included
  std::string corpus;     // empty: BuiltinTrainingCorpus()
};

struct TokenizerFiles {
  nlohmann::ordered_json tokenizer;         // tokenizer.json
  nlohmann::ordered_json tokenizer_config;  // tokenizer_config.json
};

StatusOr<TokenizerFiles> TrainByteLevelBpe(const BpeTrainerOptions& options);

// Writes dir/tokenizer.json and dir/tokenizer_config.json (dir must exist).
Status WriteTokenizerFiles(const TokenizerFiles& files, const std::string& dir);

// A few KB of varied text (English, code, Markdown, JSON, CJK and other scripts).
std::string_view BuiltinTrainingCorpus();

}  // namespace epserve::text
