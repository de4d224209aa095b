// CompileJsonSchema with its process-wide cache, and AnyJsonObject.
#include "grammar/grammar.h"

#include <list>
#include <mutex>
#include <string>
#include <unordered_map>

#include "grammar/mask_cache.h"

namespace epserve::grammar {

namespace {

// The process-wide cache of compiled grammars: an LRU bounded by the bytes its grammars take,
// their mask caches included (measured again at every insertion; a mask cache grows by at most
// kCacheBytes in between), and by kMaxEntries.
class GrammarCache {
 public:
  std::shared_ptr<const Grammar> Find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end()) {
      ++misses_;
      return nullptr;
    }
    ++hits_;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  void Insert(const std::string& key, std::shared_ptr<const Grammar> g) {
    std::lock_guard<std::mutex> lock(mu_);
    if (index_.count(key)) return;
    lru_.emplace_front(key, std::move(g));
    index_[key] = lru_.begin();
    size_t bytes = 0;
    for (const auto& [k, grammar] : lru_) bytes += k.size() + grammar->MemoryBytes();
    while (!lru_.empty() && (bytes > capacity_ || lru_.size() > kMaxEntries)) {
      bytes -= lru_.back().first.size() + lru_.back().second->MemoryBytes();
      index_.erase(lru_.back().first);
      lru_.pop_back();
      ++evictions_;
    }
    bytes_ = bytes;
  }
  void SetCapacity(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    capacity_ = bytes;
  }
  GrammarCacheStats Stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return {.bytes = bytes_,
            .entries = lru_.size(),
            .capacity_bytes = capacity_,
            .hits = hits_,
            .misses = misses_,
            .evictions = evictions_};
  }

 private:
  static constexpr size_t kMaxEntries = 4096;
  std::mutex mu_;
  size_t capacity_ = kDefaultGrammarCacheBytes, bytes_ = 0;
  int64_t hits_ = 0, misses_ = 0, evictions_ = 0;
  using Entry = std::pair<std::string, std::shared_ptr<const Grammar>>;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

GrammarCache& GlobalCache() {
  static GrammarCache* cache = new GrammarCache();
  return *cache;
}

}  // namespace

StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(const nlohmann::ordered_json& schema,
                                                           const SchemaOptions& options) {
  RETURN_IF_ERROR(CheckSchemaNesting(schema));
  std::string dump;
  try {
    dump = schema.dump();
  } catch (const nlohmann::json::exception& e) {  // a string that is not UTF-8 (type_error 316)
    return Status::InvalidArgument(std::string("the schema cannot be written as JSON: ") +
                                   e.what());
  }
  const std::string key =
      "schema|" + std::to_string(static_cast<int>(options.whitespace)) + "|" + dump;
  if (auto g = GlobalCache().Find(key)) return g;
  GrammarBuilder b;
  ASSIGN_OR_RETURN(GrammarBuilder::Expr root, b.JsonSchema(schema, options));
  ASSIGN_OR_RETURN(std::shared_ptr<const Grammar> g, b.Build(root));
  GlobalCache().Insert(key, g);
  return g;
}

StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(const nlohmann::json& schema,
                                                           const SchemaOptions& options) {
  return CompileJsonSchema(nlohmann::ordered_json(schema), options);
}

std::shared_ptr<const Grammar> AnyJsonObject() {
  static const std::shared_ptr<const Grammar> g = [] {
    GrammarBuilder b;
    return b.Build(b.AnyJsonObjectExpr()).value();
  }();
  return g;
}

}  // namespace epserve::grammar

namespace epserve::grammar {

std::shared_ptr<const Grammar> FindCachedGrammar(const std::string& key) {
  return GlobalCache().Find(key);
}

void CacheGrammar(const std::string& key, std::shared_ptr<const Grammar> g) {
  GlobalCache().Insert(key, std::move(g));
}

void SetGrammarCacheBytes(size_t bytes) { GlobalCache().SetCapacity(bytes); }

GrammarCacheStats GrammarCacheStatistics() { return GlobalCache().Stats(); }

size_t Grammar::MemoryBytes() const {
  size_t n = sizeof(Grammar) + elements.capacity() * sizeof(Element) +
             byte_sets.capacity() * sizeof(ByteSet) + min_rest.capacity() * sizeof(int64_t) +
             rule_min.capacity() * sizeof(int64_t);
  for (const auto& alts : rule_alts) n += sizeof(alts) + alts.capacity() * sizeof(uint32_t);
  for (const auto& name : rule_names) n += sizeof(name) + name.capacity();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [uid, cache] : caches_) n += cache->bytes();
  return n;
}

}  // namespace epserve::grammar
