#include "text/tokenizer.h"

#include <filesystem>

#include "text/json_util.h"
#include "text/utf8.h"

namespace epserve::text {

namespace {

const std::string kEmpty;

// bos_token / eos_token in tokenizer_config.json: a string or {"content": ...}.
StatusOr<std::string> ConfigToken(const nlohmann::json& config, const char* key,
                                  const std::string& where) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return TypeError(JoinPath(where, key), "a string or {\"content\": ...}", *it);
}

// transformers' clean_up_tokenization: no space before punctuation and common contractions.
std::string CleanUpSpaces(std::string s) {
  static const char* const kPairs[][2] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& p : kPairs) {
    std::string out;
    const std::string_view from = p[0];
    size_t prev = 0, hit;
    while ((hit = s.find(from, prev)) != std::string::npos) {
      out.append(s, prev, hit - prev);
      out.append(p[1]);
      prev = hit + from.size();
    }
    out.append(s, prev);
    s.swap(out);
  }
  return s;
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& dir) {
  const std::string tokenizer_path = dir + "/tokenizer.json";
  const std::string config_path = dir + "/tokenizer_config.json";
  ASSIGN_OR_RETURN(nlohmann::json tokenizer, ReadJsonFile(tokenizer_path));
  nlohmann::json config;
  if (std::filesystem::exists(config_path)) {
    ASSIGN_OR_RETURN(config, ReadJsonFile(config_path));
  }
  return FromJson(tokenizer, config, tokenizer_path, config_path);
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(const nlohmann::json& j,
                                                         const nlohmann::json& config,
                                                         const std::string& name,
                                                         const std::string& config_name) {
  if (!j.is_object()) return TypeError(name, "an object", j);
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  for (const char* key : {"truncation", "padding"}) {
    if (j.contains(key) && !j[key].is_null()) {
      return Status::InvalidArgument(
          name + ": " + key + ": not supported (it changes what Encode returns); set it to null");
    }
  }
  auto model = j.find("model");
  if (model == j.end()) return Status::InvalidArgument(name + ": missing \"model\"");
  ASSIGN_OR_RETURN(t->model_, BpeModel::Parse(*model, name + ": model"));
  ASSIGN_OR_RETURN(t->normalizer_,
                   ParseNormalizer(j.value("normalizer", nlohmann::json()), name + ": normalizer"));
  ASSIGN_OR_RETURN(t->pre_tokenizer_, ParsePreTokenizer(j.value("pre_tokenizer", nlohmann::json()),
                                                        name + ": pre_tokenizer"));
  ASSIGN_OR_RETURN(t->decoder_,
                   ParseDecoder(j.value("decoder", nlohmann::json()), name + ": decoder"));
  int32_t size = t->model_->max_id() + 1;
  RETURN_IF_ERROR(t->ParseAddedTokens(j.value("added_tokens", nlohmann::json::array()),
                                      name + ": added_tokens"));
  for (const AddedToken& a : t->added_) size = std::max(size, a.id + 1);
  t->id_to_token_.resize(size);
  t->special_.assign(size, false);
  for (const auto& [token, id] : t->model_->vocab()) t->id_to_token_[id] = token;
  for (const AddedToken& a : t->added_) {
    t->id_to_token_[a.id] = a.content;
    t->special_[a.id] = a.special;
  }
  RETURN_IF_ERROR(t->ParsePostProcessor(j.value("post_processor", nlohmann::json()),
                                        name + ": post_processor"));
  if (!config.is_null()) RETURN_IF_ERROR(t->ParseConfig(config, config_name));
  return t;
}

Status Tokenizer::ParseAddedTokens(const nlohmann::json& j, const std::string& where) {
  if (!j.is_array()) return TypeError(where, "an array", j);
  std::vector<AddedToken> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const nlohmann::json& e = j[i];
    if (!e.is_object()) return TypeError(at, "an object", e);
    AddedToken a;
    ASSIGN_OR_RETURN(int64_t id, GetInt(e, "id", at, -1));
    if (id < 0) return Status::InvalidArgument(at + ".id: expected a non-negative integer id");
    if (id >= kMaxVocabSize) {
      return Status::InvalidArgument(at + ".id: id " + std::to_string(id) + " is not below " +
                                     std::to_string(kMaxVocabSize));
    }
    a.id = static_cast<int32_t>(id);
    ASSIGN_OR_RETURN(a.content, GetString(e, "content", at));
    if (a.content.empty())
      return Status::InvalidArgument(at + ".content: expected a non-empty string");
    ASSIGN_OR_RETURN(a.special, GetBool(e, "special", at, false));
    ASSIGN_OR_RETURN(a.lstrip, GetBool(e, "lstrip", at, false));
    ASSIGN_OR_RETURN(a.rstrip, GetBool(e, "rstrip", at, false));
    ASSIGN_OR_RETURN(a.single_word, GetBool(e, "single_word", at, false));
    ASSIGN_OR_RETURN(a.normalized, GetBool(e, "normalized", at, !a.special));
    added_ids_[a.content] = a.id;
    added_.push_back(a);
    if (a.normalized && normalizer_) {
      std::string pattern = a.content;
      normalizer_->Apply(&pattern);
      normalized_patterns.push_back(std::move(pattern));
      normalized.push_back(std::move(a));
    } else {
      raw_patterns.push_back(a.content);
      raw.push_back(std::move(a));
    }
  }
  raw_matcher_ = AddedTokenMatcher(std::move(raw), raw_patterns);
  normalized_matcher_ = AddedTokenMatcher(std::move(normalized), normalized_patterns);
  return Status::Ok();
}

Status Tokenizer::ParsePostProcessor(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return Status::Ok();
  ASSIGN_OR_RETURN(std::string type, ComponentType(j, where));
  if (type == "ByteLevel") return Status::Ok();  // offsets only; adds no tokens
  if (type == "Sequence") {
    auto it = j.find("processors");
    if (it == j.end() || !it->is_array())
      return TypeError(where + ".processors", "an array", j.value("processors", nlohmann::json()));
    for (size_t i = 0; i < it->size(); ++i) {
      RETURN_IF_ERROR(
          ParsePostProcessor((*it)[i], where + ".processors[" + std::to_string(i) + "]"));
    }
    return Status::Ok();
  }
  auto lookup = [&](const std::string& token, const std::string& at) -> StatusOr<int32_t> {
    const int32_t id = TokenToId(token);
    if (id < 0)
      return Status::InvalidArgument(at + ": token \"" + token + "\" is not in the vocabulary");
    return id;
  };
  if (type == "TemplateProcessing") {
    auto single = j.find("single");
    if (single == j.end() || !single->is_array())
      return TypeError(where + ".single", "an array", j.value("single", nlohmann::json()));
    bool seen_sequence = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const std::string at = where + ".single[" + std::to_string(i) + "]";
      const nlohmann::json& item = (*single)[i];
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      if (!item.contains("SpecialToken") || !item["SpecialToken"].contains("id") ||
          !item["SpecialToken"]["id"].is_string()) {
        return Status::InvalidArgument(
            at + ": expected {\"Sequence\": ...} or {\"SpecialToken\": {\"id\": ...}}");
      }
      const std::string name = item["SpecialToken"]["id"].get<std::string>();
      std::vector<int32_t> ids;
      const nlohmann::json specials = j.value("special_tokens", nlohmann::json::object());
      if (specials.contains(name) && specials[name].contains("ids") &&
          specials[name]["ids"].is_array()) {
        for (const auto& id : specials[name]["ids"]) {
          if (!id.is_number_integer())
            return TypeError(where + ".special_tokens." + name + ".ids", "integers", id);
          ids.push_back(id.get<int32_t>());
        }
      } else {
        ASSIGN_OR_RETURN(int32_t id, lookup(name, at));
        ids.push_back(id);
      }
      auto& dst = seen_sequence ? suffix_ids_ : prefix_ids_;
      dst.insert(dst.end(), ids.begin(), ids.end());
    }
    return Status::Ok();
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* key : {"cls", "sep"}) {
      if (!j.contains(key) || !j[key].is_array() || j[key].size() != 2 || !j[key][0].is_string()) {
        return Status::InvalidArgument(where + "." + key + ": expected [token, id]");
      }
    }
    ASSIGN_OR_RETURN(int32_t cls, lookup(j["cls"][0].get<std::string>(), where + ".cls"));
    ASSIGN_OR_RETURN(int32_t sep, lookup(j["sep"][0].get<std::string>(), where + ".sep"));
    prefix_ids_.push_back(cls);
    suffix_ids_.push_back(sep);
    return Status::Ok();
  }
  return Unsupported(where, type);
}

Status Tokenizer::ParseConfig(const nlohmann::json& config, const std::string& where) {
  if (!config.is_object()) return TypeError(where, "an object", config);
  ASSIGN_OR_RETURN(bos_token_, ConfigToken(config, "bos_token", where));
  ASSIGN_OR_RETURN(eos_token_, ConfigToken(config, "eos_token", where));
  if (!bos_token_.empty()) {
    bos_id_ = TokenToId(bos_token_);
    if (bos_id_ < 0)
      return Status::InvalidArgument(JoinPath(where, "bos_token") + ": \"" + bos_token_ +
                                     "\" is not in the vocabulary");
  }
  if (!eos_token_.empty()) {
    eos_id_ = TokenToId(eos_token_);
    if (eos_id_ < 0)
      return Status::InvalidArgument(JoinPath(where, "eos_token") + ": \"" + eos_token_ +
                                     "\" is not in the vocabulary");
  }
  ASSIGN_OR_RETURN(clean_up_spaces_, GetBool(config, "clean_up_tokenization_spaces", where, false));
  // LlamaTokenizerFast-style configs say whether to add BOS/EOS; a post-processor that adds
  // tokens itself takes precedence.
  if (prefix_ids_.empty() && suffix_ids_.empty()) {
    ASSIGN_OR_RETURN(bool add_bos, GetBool(config, "add_bos_token", where, false));
    ASSIGN_OR_RETURN(bool add_eos, GetBool(config, "add_eos_token", where, false));
    if (add_bos && bos_id_ >= 0) prefix_ids_.push_back(bos_id_);
    if (add_eos && eos_id_ >= 0) suffix_ids_.push_back(eos_id_);
  }
  return Status::Ok();
}

int32_t Tokenizer::TokenToId(std::string_view token) const {
  auto a = added_ids_.find(token);
  if (a != added_ids_.end()) return a->second;
  auto v = model_->vocab().find(token);
  return v == model_->vocab().end() ? -1 : v->second;
}

const std::string& Tokenizer::IdToToken(int32_t id) const {
  return id >= 0 && id < vocab_size() ? id_to_token_[id] : kEmpty;
}

void Tokenizer::EncodePieces(std::vector<Piece> pieces, std::vector<int32_t>* ids) const {
  if (pre_tokenizer_) pre_tokenizer_->Apply(&pieces);
  for (const Piece& p : pieces) model_->EncodeWord(p.text, ids);
}

void Tokenizer::EncodeNormalized(std::string text, bool at_start, std::vector<int32_t>* ids) const {
  if (normalizer_) normalizer_->Apply(&text);
  if (text.empty()) return;
  if (normalized_matcher_.empty()) return EncodePieces({Piece{std::move(text), at_start}}, ids);
  for (const TextSpan& span : normalized_matcher_.Split(text)) {
    if (span.token_idx >= 0) {
      ids->push_back(normalized_matcher_.token(span.token_idx).id);
    } else {
      EncodePieces(
          {Piece{text.substr(span.begin, span.end - span.begin), at_start && span.begin == 0}},
          ids);
    }
  }
}

StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                 const EncodeOptions& options) const {
  const size_t bad = FirstInvalidUtf8(text);
  if (bad != text.size())
    return Status::InvalidArgument("text is not valid UTF-8 at byte " + std::to_string(bad));
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (options.add_special_tokens) ids = prefix_ids_;
  for (const TextSpan& span : raw_matcher_.Split(text)) {
    if (span.token_idx >= 0) {
      ids.push_back(raw_matcher_.token(span.token_idx).id);
    } else {
      EncodeNormalized(std::string(text.substr(span.begin, span.end - span.begin)), span.begin == 0,
                       &ids);
    }
  }
  if (options.add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

Status Tokenizer::DecodeBytes(std::span<const int32_t> ids, const DecodeOptions& options,
                              std::string* bytes) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || id_to_token_[id].empty()) {
      return Status::InvalidArgument("token id " + std::to_string(id) +
                                     " is not in the vocabulary (size " +
                                     std::to_string(vocab_size()) + ")");
    }
    if (options.skip_special_tokens && special_[id]) continue;
    tokens.push_back(id_to_token_[id]);
  }
  bytes->clear();
  if (!decoder_) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) bytes->push_back(' ');
      bytes->append(tokens[i]);
    }
    return Status::Ok();
  }
  decoder_->Apply(&tokens);
  for (const std::string& t : tokens) bytes->append(t);
  return Status::Ok();
}

StatusOr<std::string> Tokenizer::Decode(std::span<const int32_t> ids,
                                        const DecodeOptions& options) const {
  std::string bytes;
  RETURN_IF_ERROR(DecodeBytes(ids, options, &bytes));
  std::string text;
  text.reserve(bytes.size());
  AppendUtf8Lossy(bytes, &text);
  return clean_up_spaces_ ? CleanUpSpaces(std::move(text)) : text;
}

StatusOr<std::string> IncrementalDecoder::Add(int32_t id) {
  if (options_.skip_special_tokens && tokenizer_->IsSpecial(id)) return std::string();
  window_.push_back(id);
  std::string bytes;
  Status st = tokenizer_->DecodeBytes(window_, options_, &bytes);
  if (!st.ok()) {
    window_.pop_back();
    return st;
  }
  const size_t done = context_bytes_ + emitted_;
  if (bytes.size() < done) return std::string();  // the decoder is not prefix-stable here; wait
  const std::string_view avail = std::string_view(bytes).substr(done);
  const size_t tail = IncompleteUtf8Tail(avail);
  std::string out;
  AppendUtf8Lossy(avail.substr(0, avail.size() - tail), &out);
  emitted_ += avail.size() - tail;
  if (tail == 0) {
    // Everything so far is out: the ids after the old context become the new context.
    window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(num_context_));
    num_context_ = window_.size();
    std::string context;
    if (tokenizer_->DecodeBytes(window_, options_, &context).ok()) context_bytes_ = context.size();
    emitted_ = 0;
  }
  return out;
}

std::string IncrementalDecoder::Finish() {
  std::string bytes, out;
  if (tokenizer_->DecodeBytes(window_, options_, &bytes).ok() &&
      bytes.size() > context_bytes_ + emitted_) {
    AppendUtf8Lossy(std::string_view(bytes).substr(context_bytes_ + emitted_), &out);
  }
  window_.clear();
  num_context_ = context_bytes_ = emitted_ = 0;
  return out;
}

}  // namespace epserve::text
