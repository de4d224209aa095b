#include "text/bpe_trainer.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <unordered_map>

#include "base/output_file.h"
#include "text/deepseek_v3_tokens.h"
#include "text/pre_tokenizer.h"
#include "text/utf8.h"

namespace epserve::text {

namespace {

constexpr int kNumLeadingSpecials = 3;  // BOS, EOS, pad come first, as in DeepSeek-V3

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
};

nlohmann::ordered_json AddedTokenJson(int32_t id, const SpecialTokenSpec& s) {
  return {
      {"id", id},        {"content", s.content},       {"single_word", false}, {"lstrip", false},
      {"rstrip", false}, {"normalized", s.normalized}, {"special", s.special}};
}

nlohmann::ordered_json ConfigToken(const char* content) {
  return {{"__type", "AddedToken"}, {"content", content}, {"lstrip", false},
          {"normalized", true},     {"rstrip", false},    {"single_word", false}};
}

}  // namespace

StatusOr<TokenizerFiles> TrainByteLevelBpe(const BpeTrainerOptions& options) {
  const auto& specials = DeepSeekV3SpecialTokens();
  const int num_specials = static_cast<int>(specials.size());
  const int min_size = 256 + num_specials;
  if (options.vocab_size < min_size) {
    return Status::InvalidArgument("tokenizer vocab_size " + std::to_string(options.vocab_size) +
                                   " is below " + std::to_string(min_size) + " (256 bytes + " +
                                   std::to_string(num_specials) + " special tokens)");
  }
  // Ids below this: the leading specials, the byte tokens and the merges.
  const int num_learned = options.vocab_size - (num_specials - kNumLeadingSpecials);
  const ByteLevelAlphabet& alphabet = GetByteLevelAlphabet();

  // Token strings (byte-level alphabet) by id; the leading specials occupy ids 0..2.
  std::vector<std::string> tokens;
  std::unordered_map<std::string, int32_t> ids;
  for (int i = 0; i < kNumLeadingSpecials; ++i) tokens.push_back(specials[i].content);
  for (int b = 0; b < 256; ++b) {
    ids[alphabet.byte_to_char[b]] = static_cast<int32_t>(tokens.size());
    tokens.push_back(alphabet.byte_to_char[b]);
  }

  // Word counts from the pre-tokenized corpus (std::map: a deterministic order).
  ASSIGN_OR_RETURN(auto pre, ParsePreTokenizer(nlohmann::json::parse(DeepSeekV3PreTokenizerJson()),
                                               "pre_tokenizer"));
  const std::string corpus =
      options.corpus.empty() ? std::string(BuiltinTrainingCorpus()) : options.corpus;
  if (!IsValidUtf8(corpus)) return Status::InvalidArgument("training corpus is not valid UTF-8");
  std::vector<Piece> pieces = {{corpus, true}};
  pre->Apply(&pieces);
  std::map<std::string, int64_t> counts;
  for (const Piece& p : pieces) ++counts[p.text];
  std::vector<Word> words;
  for (const auto& [text, count] : counts) {
    Word w{{}, count};
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t begin = pos;
      NextCodePoint(text, &pos);
      w.symbols.push_back(ids.at(text.substr(begin, pos - begin)));
    }
    words.push_back(std::move(w));
  }

  std::vector<std::pair<std::string, std::string>> merges;
  auto add_merge = [&](int32_t a, int32_t b) {
    merges.emplace_back(tokens[a], tokens[b]);
    const std::string merged = tokens[a] + tokens[b];
    if (ids.emplace(merged, static_cast<int32_t>(tokens.size())).second) tokens.push_back(merged);
    return ids.at(merged);
  };
  while (static_cast<int>(tokens.size()) < num_learned) {
    // Iteration order does not matter: the choice below is a total order.
    std::unordered_map<uint64_t, int64_t> pair_counts;
    for (const Word& w : words) {
      for (size_t i = 0; i + 1 < w.symbols.size(); ++i) {
        pair_counts[(static_cast<uint64_t>(w.symbols[i]) << 32) |
                    static_cast<uint32_t>(w.symbols[i + 1])] += w.count;
      }
    }
    if (pair_counts.empty()) break;
    uint64_t best = 0;
    int64_t best_count = -1;
    std::string best_merged;
    for (const auto& [key, count] : pair_counts) {
      if (count < best_count) continue;
      std::string merged = tokens[key >> 32] + tokens[key & 0xFFFFFFFFu];
      if (count > best_count || merged < best_merged || (merged == best_merged && key < best)) {
        best = key;
        best_count = count;
        best_merged = std::move(merged);
      }
    }
    const int32_t a = static_cast<int32_t>(best >> 32),
                  b = static_cast<int32_t>(best & 0xFFFFFFFFu);
    const int32_t merged_id = add_merge(a, b);
    for (Word& w : words) {
      std::vector<int32_t> out;
      out.reserve(w.symbols.size());
      for (size_t i = 0; i < w.symbols.size(); ++i) {
        if (i + 1 < w.symbols.size() && w.symbols[i] == a && w.symbols[i + 1] == b) {
          out.push_back(merged_id);
          ++i;
        } else {
          out.push_back(w.symbols[i]);
        }
      }
      w.symbols.swap(out);
    }
  }
  // Filler: existing tokens followed by common bytes, in id order, until the vocabulary is full.
  const std::string common = " etaoinsrhldcu\n.,";
  for (size_t a = kNumLeadingSpecials; static_cast<int>(tokens.size()) < num_learned; ++a) {
    for (char c : common) {
      if (static_cast<int>(tokens.size()) >= num_learned) break;
      const int32_t b = ids.at(alphabet.byte_to_char[static_cast<uint8_t>(c)]);
      if (ids.count(tokens[a] + tokens[b]) == 0) add_merge(static_cast<int32_t>(a), b);
    }
  }

  TokenizerFiles files;
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (int i = 0; i < kNumLeadingSpecials; ++i) added.push_back(AddedTokenJson(i, specials[i]));
  for (int i = kNumLeadingSpecials; i < num_specials; ++i) {
    const int32_t id = static_cast<int32_t>(tokens.size()) + i - kNumLeadingSpecials;
    added.push_back(AddedTokenJson(id, specials[i]));
  }
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (size_t id = 0; id < tokens.size(); ++id) vocab[tokens[id]] = id;
  nlohmann::ordered_json merge_list = nlohmann::ordered_json::array();
  for (const auto& [a, b] : merges) merge_list.push_back(a + " " + b);
  auto& t = files.tokenizer;
  t["version"] = "1.0";
  t["truncation"] = nullptr;
  t["padding"] = nullptr;
  t["added_tokens"] = std::move(added);
  t["normalizer"] = {{"type", "Sequence"}, {"normalizers", nlohmann::ordered_json::array()}};
  t["pre_tokenizer"] = nlohmann::ordered_json::parse(DeepSeekV3PreTokenizerJson());
  t["post_processor"] = {{"type", "ByteLevel"},
                         {"add_prefix_space", true},
                         {"trim_offsets", false},
                         {"use_regex", true}};
  t["decoder"] = {{"type", "ByteLevel"},
                  {"add_prefix_space", true},
                  {"trim_offsets", true},
                  {"use_regex", true}};
  t["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"vocab", std::move(vocab)},
                {"merges", std::move(merge_list)}};
  auto& c = files.tokenizer_config;
  c["add_bos_token"] = true;
  c["add_eos_token"] = false;
  c["bos_token"] = ConfigToken(specials[0].content);
  c["eos_token"] = ConfigToken(specials[1].content);
  c["pad_token"] = ConfigToken(specials[1].content);
  c["clean_up_tokenization_spaces"] = false;
  c["legacy"] = true;
  c["model_max_length"] = 16384;
  c["tokenizer_class"] = "LlamaTokenizerFast";
  c["unk_token"] = nullptr;
  c["chat_template"] = std::string(DeepSeekV3ChatTemplate());
  return files;
}

Status WriteTokenizerFiles(const TokenizerFiles& files, const std::string& dir) {
  for (const auto& [name, j] :
       {std::pair<const char*, const nlohmann::ordered_json*>{"tokenizer.json", &files.tokenizer},
        {"tokenizer_config.json", &files.tokenizer_config}}) {
    const std::string path = dir + "/" + name;
    RETURN_IF_ERROR(WriteFileAtomically(path, j->dump(2, ' ', false) + "\n"));
  }
  return Status::Ok();
}

}  // namespace epserve::text
