// Tokenizer: a Hugging Face tokenizer.json (normalizer, pre-tokenizer, BPE model, added tokens,
// post-processor, decoder) plus tokenizer_config.json's bos/eos tokens and add_bos_token.
// Components the file names but this implementation lacks are errors at load naming the file
// and the component ("tokenizer.json: pre_tokenizer.pretokenizers[2]: unsupported type
// \"Foo\""); nothing is silently tokenized differently. docs/text.md lists what is supported.
//
// Encode: added tokens are found first (raw text, then normalized text for normalized ones),
// every other span is normalized, pre-tokenized and BPE-encoded.
// Decode: token strings -> decoder chain -> bytes -> UTF-8 with U+FFFD for invalid bytes.
//
// Thread safety: a loaded Tokenizer is immutable apart from the BPE word cache, which has its
// own lock; Encode and Decode may be called from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "text/added_vocab.h"
#include "text/bpe.h"
#include "text/decoder.h"
#include "text/normalizer.h"
#include "text/pre_tokenizer.h"

namespace epserve::text {

struct EncodeOptions {
  // Add what the post-processor (or tokenizer_config.json's add_bos_token/add_eos_token when
  // the post-processor adds nothing) puts around a sequence, e.g. BOS.
  bool add_special_tokens = false;
};

struct DecodeOptions {
  bool skip_special_tokens = false;
};

class Tokenizer {
 public:
  // Reads dir/tokenizer.json and, when present, dir/tokenizer_config.json.
  static StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& dir);
  // From parsed files; `config` may be null (no tokenizer_config.json). The names prefix errors.
  static StatusOr<std::unique_ptr<Tokenizer>> FromJson(
      const nlohmann::json& tokenizer, const nlohmann::json& config,
      const std::string& tokenizer_name = "tokenizer.json",
      const std::string& config_name = "tokenizer_config.json");

  // Fails only for text that is not valid UTF-8 (naming the byte offset).
  StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                        const EncodeOptions& options = {}) const;
  // Fails for ids outside [0, vocab_size()) that the vocabulary does not define.
  StatusOr<std::string> Decode(std::span<const int32_t> ids,
                               const DecodeOptions& options = {}) const;
  // The decoder chain's bytes before UTF-8 conversion (may end inside a character).
  Status DecodeBytes(std::span<const int32_t> ids, const DecodeOptions& options,
                     std::string* bytes) const;

  // Ids are < vocab_size(): the model vocabulary and the added tokens together.
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  // -1 when absent.
  int32_t TokenToId(std::string_view token) const;
  // Empty when the id is not defined.
  const std::string& IdToToken(int32_t id) const;
  bool IsSpecial(int32_t id) const { return id >= 0 && id < vocab_size() && special_[id]; }

  // From tokenizer_config.json (a string or {"content": ...}); empty / -1 when absent.
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  // Whether Encode with add_special_tokens puts a BOS first.
  bool AddsBos() const { return bos_id_ >= 0 && !prefix_ids_.empty() && prefix_ids_[0] == bos_id_; }
  const std::vector<AddedToken>& added_tokens() const { return added_; }

 private:
  Tokenizer() = default;
  Status ParseAddedTokens(const nlohmann::json& j, const std::string& where);
  Status ParsePostProcessor(const nlohmann::json& j, const std::string& where);
  Status ParseConfig(const nlohmann::json& config, const std::string& where);
  void EncodeNormalized(std::string text, bool at_start, std::vector<int32_t>* ids) const;
  void EncodePieces(std::vector<Piece> pieces, std::vector<int32_t>* ids) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<AddedToken> added_;
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized=false
  AddedTokenMatcher normalized_matcher_;  // the others, matched after normalization
  std::vector<std::string> id_to_token_;
  std::vector<bool> special_;
  TokenMap added_ids_;  // added token content -> id (takes precedence over the vocab)
  std::vector<int32_t> prefix_ids_, suffix_ids_;
  std::string bos_token_, eos_token_;
  int32_t bos_id_ = -1, eos_id_ = -1;
  bool clean_up_spaces_ = false;
};

// Streaming decode for generation: feed ids one at a time and get text pieces that never end
// inside a UTF-8 character (incomplete trailing bytes are held back until the next id completes
// them). The concatenation of every Add() and the final Finish() equals Decode() of all ids,
// byte for byte (except that clean_up_tokenization_spaces, if the config asks for it, is
// applied by Decode only).
// Thread safety: one decoder per stream; the Tokenizer must outlive it.
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer, DecodeOptions options = {})
      : tokenizer_(&tokenizer), options_(options) {}

  // The new text this id completes (possibly empty).
  StatusOr<std::string> Add(int32_t id);
  // Whatever is held back (an incomplete character becomes U+FFFD, as Decode does); resets.
  std::string Finish();

 private:
  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  // Ids since the last point where everything decoded had been emitted; the first
  // num_context_ of them were emitted already and give the rest their context (a decoder such
  // as Metaspace treats the first token differently).
  std::vector<int32_t> window_;
  size_t num_context_ = 0;
  size_t context_bytes_ = 0;  // bytes the context ids decode to
  size_t emitted_ = 0;        // bytes after the context already emitted
};

}  // namespace epserve::text
