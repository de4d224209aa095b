// Fuzzes tokenizer loading and use (text/tokenizer.h). An input is
//   tokenizer.json NUL tokenizer_config.json NUL text
// (a missing or empty config means none). A tokenizer that loads encodes the text with and
// without special tokens, decodes the ids, and decodes them one at a time with an
// IncrementalDecoder, whose pieces must add up to Decode's text (tokenizer.h promises that
// unless the config asks for clean_up_tokenization_spaces).
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz/fuzz_util.h"
#include "text/tokenizer.h"

namespace {

namespace text = epserve::text;

void CheckDecoding(const text::Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                   bool cleans_up_spaces) {
  for (bool skip : {false, true}) {
    const text::DecodeOptions options{.skip_special_tokens = skip};
    auto decoded = tokenizer.Decode(ids, options);
    text::IncrementalDecoder incremental(tokenizer, options);
    std::string pieces;
    bool all_ok = true;
    for (int32_t id : ids) {
      auto piece = incremental.Add(id);
      if (!piece.ok()) {
        all_ok = false;
        break;
      }
      pieces += *piece;
    }
    if (!all_ok || !decoded.ok()) continue;
    pieces += incremental.Finish();
    if (!cleans_up_spaces && pieces != *decoded) {
      std::fprintf(stderr, "incremental decoding gives \"%s\", Decode \"%s\"\n", pieces.c_str(),
                   decoded->c_str());
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest = epserve::fuzz::AsText(data, size);
  const std::string_view tokenizer_text = epserve::fuzz::TakePart(&rest);
  const std::string_view config_text = epserve::fuzz::TakePart(&rest);
  const std::string_view input = rest;

  const nlohmann::json tokenizer_json =
      nlohmann::json::parse(tokenizer_text, nullptr, /*allow_exceptions=*/false);
  if (tokenizer_json.is_discarded()) return 0;
  nlohmann::json config_json;  // null: no tokenizer_config.json
  if (!config_text.empty()) {
    config_json = nlohmann::json::parse(config_text, nullptr, /*allow_exceptions=*/false);
    if (config_json.is_discarded()) return 0;
  }
  auto tokenizer = text::Tokenizer::FromJson(tokenizer_json, config_json);
  if (!tokenizer.ok()) return 0;
  bool cleans_up_spaces = false;
  if (config_json.is_object()) {
    auto clean_up = config_json.find("clean_up_tokenization_spaces");
    cleans_up_spaces = clean_up != config_json.end() && *clean_up == true;
  }
  for (bool special : {false, true}) {
    auto ids = (*tokenizer)->Encode(input, {.add_special_tokens = special});
    if (ids.ok()) CheckDecoding(**tokenizer, *ids, cleans_up_spaces);
  }
  return 0;
}
