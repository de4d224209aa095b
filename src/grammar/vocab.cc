#include "grammar/vocab.h"

#include <algorithm>
#include <atomic>
#include <numeric>
#include <string_view>

#include "text/tokenizer.h"

namespace epserve::grammar {

std::shared_ptr<const TokenVocab> TokenVocab::Create(std::vector<std::string> token_bytes,
                                                     std::vector<bool> special,
                                                     std::vector<int32_t> stop_ids) {
  static std::atomic<uint64_t> next_uid{1};
  CHECK(special.size() == token_bytes.size()) << "special flags and token bytes differ in length";
  std::shared_ptr<TokenVocab> v(new TokenVocab());
  v->uid_ = next_uid.fetch_add(1);
  v->bytes_ = std::move(token_bytes);
  v->special_.assign(special.begin(), special.end());
  v->stop_.assign(v->bytes_.size(), 0);
  std::sort(stop_ids.begin(), stop_ids.end());
  stop_ids.erase(std::unique(stop_ids.begin(), stop_ids.end()), stop_ids.end());
  for (int32_t id : stop_ids) {
    CHECK(id >= 0 && id < v->size()) << "stop id " << id << " outside the vocabulary";
    v->stop_[id] = 1;
  }
  v->stop_ids_ = std::move(stop_ids);
  v->BuildTrie();
  return v;
}

void TokenVocab::BuildTrie() {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < size(); ++id) {
    if (!special_[id] && !bytes_[id].empty()) ids.push_back(id);
  }
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b]; });
  std::vector<uint32_t> path;  // trie_ indices of the current path; path.size() = depth
  std::string_view prev;
  for (int32_t id : ids) {
    const std::string_view cur = bytes_[id];
    max_token_bytes_ = std::max(max_token_bytes_, static_cast<int>(cur.size()));
    size_t lcp = 0;
    while (lcp < std::min(prev.size(), cur.size()) && prev[lcp] == cur[lcp]) ++lcp;
    lcp = std::min(lcp, path.size());
    while (path.size() > lcp) {
      trie_[path.back()].end = static_cast<uint32_t>(trie_.size());
      path.pop_back();
    }
    for (size_t d = path.size(); d < cur.size(); ++d) {
      path.push_back(static_cast<uint32_t>(trie_.size()));
      trie_.push_back({.end = 0,
                       .first_id = static_cast<uint32_t>(trie_ids_.size()),
                       .num_ids = 0,
                       .depth = static_cast<uint16_t>(d + 1),
                       .byte = static_cast<uint8_t>(cur[d])});
    }
    TrieNode& last = trie_[path.back()];
    if (last.num_ids == 0) last.first_id = static_cast<uint32_t>(trie_ids_.size());
    trie_ids_.push_back(id);
    ++last.num_ids;
    prev = cur;
  }
  while (!path.empty()) {
    trie_[path.back()].end = static_cast<uint32_t>(trie_.size());
    path.pop_back();
  }
}

StatusOr<std::shared_ptr<const TokenVocab>> TokenVocab::FromTokenizer(const text::Tokenizer& tok,
                                                                      std::vector<int32_t> stop_ids,
                                                                      int32_t model_vocab_size) {
  const int32_t n = std::max(tok.vocab_size(), model_vocab_size);
  std::vector<std::string> bytes(n);
  std::vector<bool> special(n, false);
  for (const text::AddedToken& t : tok.added_tokens()) {
    if (t.id >= 0 && t.id < n) special[t.id] = true;
  }
  for (int32_t id = tok.vocab_size(); id < n; ++id) special[id] = true;  // padding
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.IsSpecial(id)) special[id] = true;
    if (special[id]) continue;
    const int32_t one[1] = {id};
    if (!tok.DecodeBytes(one, {}, &bytes[id]).ok()) special[id] = true;  // an undefined id
  }
  for (int32_t id : stop_ids) {
    if (id < 0 || id >= n) {
      return Status::InvalidArgument("stop id " + std::to_string(id) +
                                     " outside the vocabulary of " + std::to_string(n));
    }
  }
  return Create(std::move(bytes), std::move(special), std::move(stop_ids));
}

}  // namespace epserve::grammar
