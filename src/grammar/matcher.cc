#include "grammar/matcher.h"

#include <algorithm>
#include <cstring>

#include "grammar/builder.h"
#include "grammar/mask_cache.h"
#include "grammar/matcher_state.h"

namespace epserve::grammar {

namespace {

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

uint64_t PairHash(uint32_t pos, int32_t parent) {
  return Mix((uint64_t{pos} << 32) | static_cast<uint32_t>(parent));
}

void SortUnique(StackSet* s) {
  std::sort(s->begin(), s->end());
  s->erase(std::unique(s->begin(), s->end()), s->end());
}

}  // namespace

void StackPool::Clear() {
  nodes_.clear();
  slots_.assign(1024, -1);
}

void StackPool::Grow() {
  slots_.assign(slots_.size() * 2, -1);
  const size_t mask = slots_.size() - 1;
  for (size_t id = 0; id < nodes_.size(); ++id) {
    size_t h = PairHash(nodes_[id].pos, nodes_[id].parent) & mask;
    while (slots_[h] >= 0) h = (h + 1) & mask;
    slots_[h] = static_cast<int32_t>(id);
  }
}

int32_t StackPool::Intern(uint32_t pos, int32_t parent) {
  size_t mask = slots_.size() - 1;
  size_t h = PairHash(pos, parent) & mask;
  while (slots_[h] >= 0) {
    const StackNode& n = nodes_[slots_[h]];
    if (n.pos == pos && n.parent == parent) return slots_[h];
    h = (h + 1) & mask;
  }
  const int32_t id = static_cast<int32_t>(nodes_.size());
  nodes_.push_back(
      {pos, parent, g_->min_rest[pos] + (parent >= 0 ? nodes_[parent].cost : int64_t{0})});
  if (nodes_.size() * 2 > slots_.size()) {
    Grow();
  } else {
    slots_[h] = id;
  }
  return id;
}

void PairSet::Clear() {
  count_ = 0;
  if (keys_.empty() || ++gen_ == 0) {
    keys_.assign(std::max<size_t>(keys_.size(), 256), 0);
    gens_.assign(keys_.size(), 0);
    gen_ = 1;
  }
}

bool PairSet::Insert(uint64_t key) {
  if ((count_ + 1) * 2 > keys_.size()) Grow();
  const size_t mask = keys_.size() - 1;
  for (size_t h = Mix(key) & mask;; h = (h + 1) & mask) {
    if (gens_[h] != gen_) {
      gens_[h] = gen_;
      keys_[h] = key;
      ++count_;
      return true;
    }
    if (keys_[h] == key) return false;
  }
}

void PairSet::Grow() {
  std::vector<uint64_t> live;
  live.reserve(count_);
  for (size_t i = 0; i < keys_.size(); ++i)
    if (gens_[i] == gen_) live.push_back(keys_[i]);
  keys_.assign(keys_.size() * 2, 0);
  gens_.assign(keys_.size(), 0);
  gen_ = 1;
  count_ = 0;
  for (uint64_t k : live) Insert(k);
}

void Matcher::State::Settle(uint32_t pos0, int32_t parent0, StackSet* out) {
  if (overflow) return;
  work.clear();
  work.push_back({pos0, parent0});
  while (!work.empty()) {
    const auto [pos, parent] = work.back();
    work.pop_back();
    if (!seen.Insert((uint64_t{pos} << 32) | static_cast<uint32_t>(parent))) continue;
    if (seen.size() > kMaxClosure) {
      overflow = true;
      return;
    }
    const Element& e = grammar->elements[pos];
    switch (e.kind) {
      case ElementKind::kEnd:
        if (parent < 0) {
          out->push_back(-1);
        } else {
          const StackNode n = pool.node(parent);
          work.push_back({n.pos, n.parent});
        }
        break;
      case ElementKind::kBytes:
      case ElementKind::kToken:
        out->push_back(pool.Intern(pos, parent));
        break;
      case ElementKind::kRef: {
        // A reference in tail position continues straight with the parent, so right-recursive
        // loops (x*) keep the stack flat.
        const int32_t cont = grammar->elements[pos + 1].kind == ElementKind::kEnd
                                 ? parent
                                 : pool.Intern(pos + 1, parent);
        const std::vector<uint32_t>& alts = grammar->rule_alts[e.arg];
        for (auto it = alts.rbegin(); it != alts.rend(); ++it) work.push_back({*it, cont});
        break;
      }
    }
  }
}

Status CheckStartClosure(const Grammar& g) {
  Matcher::State s(&g, nullptr);
  s.BeginStep();
  s.Settle(0, -1, &s.stacks);
  if (s.overflow)
    return Status::InvalidArgument(std::string(kTooComplexPrefix) +
                                   ": its start state expands to over " +
                                   std::to_string(kMaxClosure) + " parse stacks");
  return Status::Ok();
}

bool IsTooComplex(const Status& s) {
  return !s.ok() && s.message().find(kTooComplexPrefix) != std::string::npos;
}

void Matcher::State::StepByte(const StackSet& in, uint8_t b, StackSet* out) {
  out->clear();
  BeginStep();
  for (int32_t id : in) {
    if (id < 0) continue;
    const StackNode n = pool.node(id);
    const Element& e = grammar->elements[n.pos];
    if (e.kind == ElementKind::kBytes && grammar->byte_sets[e.arg].Has(b)) {
      Settle(n.pos + 1, n.parent, out);
    }
  }
  if (out->size() > 1) SortUnique(out);
}

void Matcher::State::StepToken(const StackSet& in, int32_t id, StackSet* out) {
  out->clear();
  BeginStep();
  for (int32_t s : in) {
    if (s < 0) continue;
    const StackNode n = pool.node(s);
    const Element& e = grammar->elements[n.pos];
    if (e.kind == ElementKind::kToken && static_cast<int32_t>(e.arg) == id) {
      Settle(n.pos + 1, n.parent, out);
    }
  }
  if (out->size() > 1) SortUnique(out);
}

int64_t Matcher::State::Cost(const StackSet& set) const {
  int64_t best = -1;
  for (int32_t id : set) {
    const int64_t c = id < 0 ? 0 : pool.node(id).cost;
    if (best < 0 || c < best) best = c;
  }
  return best;
}

void Matcher::State::Key(std::vector<uint32_t>* key) const {
  std::vector<std::vector<uint32_t>> seqs;
  seqs.reserve(stacks.size());
  for (int32_t id : stacks) {
    std::vector<uint32_t> seq;
    for (int32_t n = id; n >= 0; n = pool.node(n).parent) seq.push_back(pool.node(n).pos);
    seqs.push_back(std::move(seq));
  }
  std::sort(seqs.begin(), seqs.end());
  key->clear();
  for (const auto& seq : seqs) {
    key->insert(key->end(), seq.begin(), seq.end());
    key->push_back(0xFFFFFFFFu);
  }
}

void Matcher::State::MaybeCompact() {
  constexpr size_t kMinCompact = size_t{1} << 18;
  if (pool.size() < kMinCompact) return;
  // Copy the live chains (bottom first) into a fresh pool.
  std::vector<std::vector<uint32_t>> chains;
  for (int32_t id : stacks) {
    std::vector<uint32_t> chain;
    for (int32_t n = id; n >= 0; n = pool.node(n).parent) chain.push_back(pool.node(n).pos);
    chains.push_back(std::move(chain));
  }
  const bool complete = !stacks.empty() && stacks[0] == -1;
  pool.Clear();
  stacks.clear();
  if (complete) stacks.push_back(-1);
  for (const auto& chain : chains) {
    int32_t parent = -1;
    for (size_t i = chain.size(); i-- > 0;) parent = pool.Intern(chain[i], parent);
    stacks.push_back(parent);
  }
  SortUnique(&stacks);
}

Matcher::Matcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocab> v)
    : grammar_(std::move(g)), vocab_(std::move(v)) {
  state_ = std::make_unique<State>(grammar_.get(), vocab_.get());
  state_->BeginStep();
  state_->Settle(0, -1, &state_->stacks);
  SortUnique(&state_->stacks);
}

Matcher::~Matcher() = default;

Matcher::Matcher(const Matcher& o)
    : grammar_(o.grammar_), vocab_(o.vocab_), state_(std::make_unique<State>(*o.state_)) {}

Matcher& Matcher::operator=(const Matcher& o) {
  if (this != &o) {
    grammar_ = o.grammar_;
    vocab_ = o.vocab_;
    state_ = std::make_unique<State>(*o.state_);
  }
  return *this;
}

bool Matcher::AcceptToken(int32_t id) {
  State& s = *state_;
  if (s.terminated || s.overflow || id < 0 || id >= vocab_->size()) return false;
  StackSet next;
  s.StepToken(s.stacks, id, &next);
  const std::string& bytes = vocab_->bytes(id);
  if (!vocab_->is_special(id) && !bytes.empty()) {
    s.tmp_a = s.stacks;
    for (char c : bytes) {
      s.StepByte(s.tmp_a, static_cast<uint8_t>(c), &s.tmp_b);
      std::swap(s.tmp_a, s.tmp_b);
      if (s.tmp_a.empty()) break;
    }
    next.insert(next.end(), s.tmp_a.begin(), s.tmp_a.end());
    SortUnique(&next);
  }
  if (s.overflow) return false;
  if (!next.empty()) {
    s.stacks = std::move(next);
    s.MaybeCompact();
    return true;
  }
  if (vocab_->is_stop(id) && IsComplete()) {
    s.terminated = true;
    return true;
  }
  return false;
}

int64_t Matcher::MinBytesToComplete() const {
  return state_->terminated ? 0 : state_->Cost(state_->stacks);
}

bool Matcher::IsComplete() const {
  return state_->terminated || (!state_->stacks.empty() && state_->stacks[0] == -1);
}

bool Matcher::IsTerminated() const {
  return state_->terminated || (state_->stacks.size() == 1 && state_->stacks[0] == -1);
}

void Matcher::FillMask(uint64_t* words) {
  State& s = *state_;
  const size_t num_words = (static_cast<size_t>(vocab_->size()) + 63) / 64;
  if (s.terminated) {
    std::memset(words, 0, num_words * sizeof(uint64_t));
    return;
  }
  MaskCache& cache = grammar_->CacheFor(*vocab_);
  std::vector<uint32_t> key;
  s.Key(&key);
  if (cache.Find(key, words)) {
    ++s.cache_hits;
    return;
  }
  ++s.cache_misses;
  s.ComputeMask(words);
  cache.Insert(std::move(key), words);
}

void Matcher::FillClosingMask(uint64_t* words) { state_->ComputeClosingMask(words); }

bool Matcher::Overflowed() const { return state_->overflow; }

Matcher::CacheStats Matcher::cache_stats() const {
  return {.hits = state_->cache_hits, .misses = state_->cache_misses};
}

}  // namespace epserve::grammar
