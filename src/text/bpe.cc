#include "text/bpe.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "text/json_util.h"
#include "text/utf8.h"

namespace epserve::text {

namespace {

// Splits a merge entry into its two parts: "a b" (split at the first space, as Hugging Face
// does) or ["a", "b"].
StatusOr<std::pair<std::string, std::string>> ParseMerge(const nlohmann::json& m,
                                                         const std::string& where) {
  if (m.is_string()) {
    const std::string& s = m.get_ref<const std::string&>();
    const size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
      return Status::InvalidArgument(
          where + ": expected \"a b\" (two tokens separated by one space), got \"" + s + "\"");
    }
    return std::make_pair(s.substr(0, space), s.substr(space + 1));
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    return std::make_pair(m[0].get<std::string>(), m[1].get<std::string>());
  }
  return TypeError(where, "a string \"a b\" or a pair [\"a\", \"b\"]", m);
}

}  // namespace

StatusOr<std::unique_ptr<BpeModel>> BpeModel::Parse(const nlohmann::json& j,
                                                    const std::string& where) {
  ASSIGN_OR_RETURN(std::string type, ComponentType(j, where));
  if (type != "BPE") return Unsupported(where, type);
  std::unique_ptr<BpeModel> m(new BpeModel());
  if (j.contains("dropout") && !j["dropout"].is_null() &&
      !(j["dropout"].is_number() && j["dropout"].get<double>() == 0)) {
    return Status::InvalidArgument(
        where + ".dropout: BPE dropout is not supported (it makes encoding random)");
  }
  auto vocab = j.find("vocab");
  if (vocab == j.end() || !vocab->is_object())
    return TypeError(where + ".vocab", "an object", j.value("vocab", nlohmann::json()));
  m->vocab_.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    auto at = [&] { return where + ".vocab[\"" + it.key() + "\"]"; };
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return TypeError(at(), "a non-negative integer id", *it);
    }
    if (it->get<int64_t>() >= kMaxVocabSize) {
      return Status::InvalidArgument(at() + ": id " + std::to_string(it->get<int64_t>()) +
                                     " is not below " + std::to_string(kMaxVocabSize));
    }
    const int32_t id = it->get<int32_t>();
    m->vocab_.emplace(it.key(), id);
    m->max_id_ = std::max(m->max_id_, id);
  }
  ASSIGN_OR_RETURN(m->prefix_, GetString(j, "continuing_subword_prefix", where));
  ASSIGN_OR_RETURN(m->suffix_, GetString(j, "end_of_word_suffix", where));
  ASSIGN_OR_RETURN(m->fuse_unk_, GetBool(j, "fuse_unk", where, false));
  ASSIGN_OR_RETURN(m->byte_fallback_, GetBool(j, "byte_fallback", where, false));
  ASSIGN_OR_RETURN(m->ignore_merges_, GetBool(j, "ignore_merges", where, false));
  ASSIGN_OR_RETURN(std::string unk, GetString(j, "unk_token", where));
  if (!unk.empty()) {
    auto it = m->vocab_.find(unk);
    if (it == m->vocab_.end())
      return Status::InvalidArgument(where + ".unk_token: \"" + unk + "\" is not in the vocab");
    m->unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto it = m->vocab_.find(std::string_view(name));
    m->byte_ids_[b] = it == m->vocab_.end() ? -1 : it->second;
  }
  auto merges = j.find("merges");
  if (merges != j.end() && !merges->is_null()) {
    if (!merges->is_array()) return TypeError(where + ".merges", "an array", *merges);
    m->merges_.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
      const std::string at = where + ".merges[" + std::to_string(i) + "]";
      ASSIGN_OR_RETURN(auto pair, ParseMerge((*merges)[i], at));
      auto a = m->vocab_.find(pair.first);
      auto b = m->vocab_.find(pair.second);
      if (a == m->vocab_.end())
        return Status::InvalidArgument(at + ": token \"" + pair.first + "\" is not in the vocab");
      if (b == m->vocab_.end())
        return Status::InvalidArgument(at + ": token \"" + pair.second + "\" is not in the vocab");
      std::string merged = pair.first;
      if (!m->prefix_.empty() && pair.second.compare(0, m->prefix_.size(), m->prefix_) == 0) {
        merged.append(pair.second, m->prefix_.size());
      } else {
        merged.append(pair.second);
      }
      auto n = m->vocab_.find(merged);
      if (n == m->vocab_.end())
        return Status::InvalidArgument(at + ": merged token \"" + merged +
                                       "\" is not in the vocab");
      // A repeated pair takes its last rank, as Hugging Face's and transformers.js's maps do.
      m->merges_.insert_or_assign(PairKey(a->second, b->second),
                                  MergeTarget{static_cast<int32_t>(i), n->second});
    }
  }
  return m;
}

void BpeModel::AppendSymbol(std::string_view piece, std::vector<int32_t>* symbols) const {
  auto it = vocab_.find(piece);
  if (it != vocab_.end()) {
    symbols->push_back(it->second);
    return;
  }
  if (byte_fallback_) {
    bool all = true;
    for (unsigned char c : piece) all &= byte_ids_[c] >= 0;
    if (all) {
      for (unsigned char c : piece) symbols->push_back(byte_ids_[c]);
      return;
    }
  }
  if (unk_id_ < 0) return;  // Hugging Face drops characters it has no token for
  if (fuse_unk_ && !symbols->empty() && symbols->back() == unk_id_) return;
  symbols->push_back(unk_id_);
}

void BpeModel::Merge(std::string_view word, std::vector<int32_t>* ids) const {
  if (ignore_merges_) {
    auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  // Initial symbols: one per character (with prefix/suffix decorations).
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  std::string decorated;
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t begin = pos;
    const int n = Utf8SequenceLength(static_cast<uint8_t>(word[pos]));
    pos = std::min(word.size(), pos + (n > 0 ? n : 1));
    std::string_view ch = word.substr(begin, pos - begin);
    if ((begin > 0 && !prefix_.empty()) || (pos == word.size() && !suffix_.empty())) {
      decorated.assign(begin > 0 ? prefix_ : "");
      decorated.append(ch);
      if (pos == word.size()) decorated.append(suffix_);
      AppendSymbol(decorated, &symbols);
    } else {
      AppendSymbol(ch, &symbols);
    }
  }
  const int num = static_cast<int>(symbols.size());
  if (num <= 1) {
    ids->insert(ids->end(), symbols.begin(), symbols.end());
    return;
  }
  // Doubly linked list over symbols; removed symbols get id -1.
  std::vector<int> prev(num), next(num);
  for (int i = 0; i < num; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < num ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Candidate> storage;
  storage.reserve(num);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue(std::greater<>(),
                                                                               std::move(storage));
  auto push_pair = [&](int i) {
    if (i < 0 || next[i] < 0) return;
    auto it = merges_.find(PairKey(symbols[i], symbols[next[i]]));
    if (it != merges_.end()) queue.push({it->second.rank, i, it->second.new_id});
  };
  for (int i = 0; i + 1 < num; ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const int i = top.pos;
    if (symbols[i] < 0 || next[i] < 0) continue;
    const int j = next[i];
    auto it = merges_.find(PairKey(symbols[i], symbols[j]));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
    symbols[i] = top.new_id;
    symbols[j] = -1;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    push_pair(prev[i]);
    push_pair(i);
  }
  for (int i = 0; i >= 0; i = next[i]) ids->push_back(symbols[i]);
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.size() > kMaxCachedWordBytes) return Merge(word, ids);
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = ids->size();
  Merge(word, ids);
  std::vector<int32_t> result(ids->begin() + start, ids->end());
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() >= kCacheCapacity) cache_.clear();
  cache_.emplace(std::string(word), std::move(result));
}

}  // namespace epserve::text
