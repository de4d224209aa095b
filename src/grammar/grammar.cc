// CompileJsonSchema with its process-wide cache, and AnyJsonObject.
#include "grammar/grammar.h"

#include <list>
#include <mutex>
#include <string>

namespace epserve::grammar {

namespace {

// The process-wide cache of compiled schemas (bounded LRU), as the API promises.
class SchemaCache {
 public:
  std::shared_ptr<const Grammar> Find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      if (it->first == key) {
        lru_.splice(lru_.begin(), lru_, it);
        return lru_.front().second;
      }
    }
    return nullptr;
  }
  void Insert(const std::string& key, std::shared_ptr<const Grammar> g) {
    std::lock_guard<std::mutex> lock(mu_);
    lru_.emplace_front(key, std::move(g));
    if (lru_.size() > kCapacity) lru_.pop_back();
  }

 private:
  static constexpr size_t kCapacity = 64;
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<const Grammar>>> lru_;
};

SchemaCache& GlobalSchemaCache() {
  static SchemaCache* cache = new SchemaCache();
  return *cache;
}

}  // namespace

StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(const nlohmann::ordered_json& schema,
                                                           const SchemaOptions& options) {
  const std::string key =
      std::to_string(static_cast<int>(options.whitespace)) + "|" + schema.dump();
  if (auto g = GlobalSchemaCache().Find(key)) return g;
  GrammarBuilder b;
  ASSIGN_OR_RETURN(GrammarBuilder::Expr root, b.JsonSchema(schema, options));
  ASSIGN_OR_RETURN(std::shared_ptr<const Grammar> g, b.Build(root));
  GlobalSchemaCache().Insert(key, g);
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
